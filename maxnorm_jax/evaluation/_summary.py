"""The metrics of one evaluation set: per-prompt estimators -> `<prefix>/<metric>` with `_n`
(number of prompts) and `_std` (bootstrap std over prompts) companions."""

from __future__ import annotations

from typing import Hashable, Sequence

import numpy as np

from maxnorm_jax.evaluation._estimators import bootstrap_stds, greedy_accuracy, maj_at_k, mean_at_n, pass_at_k


def is_correct(rewards: np.ndarray, resolution: np.ndarray) -> np.ndarray:
  """A sample is correct when its reward lies within half a resolution step of 1 (binary
  verifiers: reward >= 0.5, so arith_noisy's jittered 1 - 1e-4 counts; a 1/k grid: only k/k)."""
  rewards = np.asarray(rewards, np.float64)
  return rewards >= 1.0 - 0.5 * np.asarray(resolution, np.float64)


def set_metrics(
  prefix: str,
  rewards: np.ndarray,
  correct: np.ndarray,
  greedy_correct: np.ndarray,
  *,
  pass_k: Sequence[int],
  answers: Sequence[Sequence[Hashable | None]] | None = None,
  num_resamples: int = 1000,
  seed: int = 0,
) -> dict[str, float]:
  """Metrics of one set of P prompts with n samples each.

  rewards [P, n], correct [P, n] bool (samples at eval temperature); greedy_correct [P] bool.
  Gives `<prefix>/mean@<n>`, `<prefix>/pass@<k>` for each k <= n of `pass_k`, `<prefix>/maj@<k>`
  for the same k when `answers` (canonical answers [P][n]) are given, and `<prefix>/greedy_acc`;
  each with `_n` and `_std` (bootstrap over prompts, `num_resamples` resamples, numpy seed `seed`).
  """
  rewards = np.asarray(rewards, np.float64)
  correct = np.asarray(correct, bool)
  if rewards.ndim != 2 or rewards.shape != correct.shape:
    raise ValueError(f"set_metrics: rewards {rewards.shape} and correct {correct.shape} must both be [P, n]")
  if rewards.shape[0] == 0:
    raise ValueError(f"set_metrics({prefix!r}): no prompts to evaluate")
  n = rewards.shape[1]
  per_prompt = {f"{prefix}/mean@{n}": mean_at_n(rewards)}
  ks = sorted({int(k) for k in pass_k if int(k) <= n})
  c = correct.sum(axis=1)
  for k in ks:
    per_prompt[f"{prefix}/pass@{k}"] = pass_at_k(n, c, k)
  if answers is not None:
    for k in ks:
      per_prompt[f"{prefix}/maj@{k}"] = maj_at_k(answers, correct, k)
  per_prompt[f"{prefix}/greedy_acc"] = greedy_accuracy(greedy_correct)
  stds = bootstrap_stds(np.stack(list(per_prompt.values())), num_resamples, seed)
  out: dict[str, float] = {}
  for (name, values), std in zip(per_prompt.items(), stds):
    out[name] = float(values.mean())
    out[name + "_n"] = float(values.size)
    out[name + "_std"] = float(std)
  return out
