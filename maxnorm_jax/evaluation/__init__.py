"""Evaluation that can be trusted (docs/DESIGN.md §3.8): unbiased pass@k, maj@k, mean@n, greedy accuracy,
bootstrap stds over prompts, held-out splits, and the trainer's evaluation sets.

    from maxnorm_jax.evaluation import pass_at_k
    pass_at_k(16, c=np.array([0, 3, 16]), k=4)     # per prompt, 1 - C(n-c, k) / C(n, k)
"""

from maxnorm_jax.evaluation._estimators import (
  bootstrap_std,
  bootstrap_stds,
  greedy_accuracy,
  maj_at_k,
  majority_answer,
  mean_at_n,
  pass_at_k,
)
from maxnorm_jax.evaluation._evaluator import Evaluator, canonical_answer
from maxnorm_jax.evaluation._sets import DEFAULT_SET, EvalSet, build_eval_sets, eval_prompt_rows, parse_sets
from maxnorm_jax.evaluation._summary import is_correct, set_metrics

__all__ = [
  "DEFAULT_SET",
  "EvalSet",
  "Evaluator",
  "build_eval_sets",
  "canonical_answer",
  "eval_prompt_rows",
  "parse_sets",
  "bootstrap_std",
  "bootstrap_stds",
  "greedy_accuracy",
  "is_correct",
  "maj_at_k",
  "majority_answer",
  "mean_at_n",
  "pass_at_k",
  "set_metrics",
]
