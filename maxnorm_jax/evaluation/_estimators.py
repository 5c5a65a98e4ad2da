"""Per-prompt estimators of the metrics researchers report (docs/DESIGN.md §3.8), pure numpy on the host.

Every estimator maps per-prompt arrays to one value per prompt ([P]); the reported metric is their
mean over prompts, with `bootstrap_std` as its uncertainty.
"""

from __future__ import annotations

from typing import Hashable, Sequence

import numpy as np


def pass_at_k(n, c, k) -> np.ndarray:
  """Unbiased pass@k (Chen et al. 2021): 1 - C(n - c, k) / C(n, k), the chance that k of the n
  samples drawn without replacement hold at least one of the c correct ones.

  n, c, k broadcast (ints or integer arrays). Computed in the stable product form
  1 - prod_{i = n - c + 1}^{n} (1 - k / i), which never forms a binomial coefficient.
  Raises ValueError when k < 1, k > n, c < 0 or c > n anywhere.
  """
  n, c, k = np.broadcast_arrays(np.asarray(n), np.asarray(c), np.asarray(k))
  for name, a in (("n", n), ("c", c), ("k", k)):
    if a.size and not np.all(np.equal(np.mod(a, 1), 0)):
      raise ValueError(f"pass_at_k: {name} must be integers, got {a}")
  if np.any(k < 1):
    raise ValueError(f"pass_at_k: k must be >= 1, got {k}")
  if np.any(k > n):
    raise ValueError(f"pass_at_k: k must be <= n (the samples per prompt), got k={k}, n={n}")
  if np.any(c < 0) or np.any(c > n):
    raise ValueError(f"pass_at_k: c (correct samples) must lie in [0, n], got c={c}, n={n}")
  n, c, k = (a.astype(np.int64) for a in (n, c, k))
  certain = n - c < k  # every draw of k holds a correct sample
  # Term j of the product is 1 - k / (n - c + 1 + j) for j < c; padded with 1 past c.
  j = np.arange(int(c.max()) if c.size else 0)
  i = (n - c + 1)[..., None] + j
  terms = np.where(j < c[..., None], 1.0 - k[..., None] / np.maximum(i, 1), 1.0)
  return np.where(certain, 1.0, 1.0 - np.prod(terms, axis=-1))


def mean_at_n(rewards: np.ndarray) -> np.ndarray:
  """mean@n: each prompt's mean reward over its n samples. rewards [P, n] -> [P]."""
  rewards = np.asarray(rewards, np.float64)
  if rewards.ndim != 2 or rewards.shape[1] < 1:
    raise ValueError(f"mean_at_n: rewards must be [P, n] with n >= 1, got shape {rewards.shape}")
  return rewards.mean(axis=1)


def greedy_accuracy(correct: np.ndarray) -> np.ndarray:
  """Greedy accuracy: 1 where the prompt's greedy completion is correct. correct [P] -> [P] float."""
  correct = np.asarray(correct)
  if correct.ndim != 1:
    raise ValueError(f"greedy_accuracy: correct must be [P], got shape {correct.shape}")
  return correct.astype(np.float64)


def majority_answer(answers: Sequence[Hashable | None]) -> int | None:
  """Index of the first sample holding the most frequent answer; None answers do not vote.

  Ties go to the answer that occurs first among the samples (deterministic). None when no
  sample has an answer.
  """
  counts: dict[Hashable, int] = {}
  first: dict[Hashable, int] = {}
  for i, a in enumerate(answers):
    if a is None:
      continue
    counts[a] = counts.get(a, 0) + 1
    first.setdefault(a, i)
  if not counts:
    return None
  best = max(counts, key=lambda a: (counts[a], -first[a]))
  return first[best]


def maj_at_k(answers: Sequence[Sequence[Hashable | None]], correct: np.ndarray, k: int) -> np.ndarray:
  """maj@k: 1 where the majority answer among a prompt's first k samples is correct.

  answers: per prompt, the verifier's canonical answer of each of its n samples (None: no
  answer). correct [P, n] bool. The samples are i.i.d., so the first k of them are a draw of k.
  Ties between answers go to the one occurring first; a prompt with no answer scores 0.
  Returns [P] float.
  """
  correct = np.asarray(correct, bool)
  if correct.ndim != 2 or len(answers) != correct.shape[0]:
    raise ValueError(f"maj_at_k: correct must be [P, n] with P = len(answers) = {len(answers)}, got {correct.shape}")
  n = correct.shape[1]
  if not 1 <= k <= n:
    raise ValueError(f"maj_at_k: k must lie in [1, n={n}], got {k}")
  out = np.zeros(correct.shape[0], np.float64)
  for p, row in enumerate(answers):
    if len(row) != n:
      raise ValueError(f"maj_at_k: prompt {p} has {len(row)} answers, expected n={n}")
    i = majority_answer(list(row)[:k])
    out[p] = float(i is not None and correct[p, i])
  return out


def bootstrap_stds(values: np.ndarray, num_resamples: int = 1000, seed: int = 0) -> np.ndarray:
  """Bootstrap std over prompts of the mean of each row of per-prompt `values` [M, P] -> [M]: the
  std of the means over `num_resamples` resamples of P prompts drawn with replacement (a numpy
  generator seeded by `seed`; every row sees the same resamples). 0.0 for a single prompt; NaN for none."""
  values = np.asarray(values, np.float64)
  if values.ndim != 2:
    raise ValueError(f"bootstrap_stds: values must be [M, P], got shape {values.shape}")
  if num_resamples < 2:
    raise ValueError(f"bootstrap_std: num_resamples must be >= 2, got {num_resamples}")
  m, p = values.shape
  if p == 0:
    return np.full(m, np.nan)
  rng = np.random.default_rng(seed)
  idx = rng.integers(0, p, size=(num_resamples, p))
  counts = np.bincount((idx + p * np.arange(num_resamples)[:, None]).ravel(), minlength=num_resamples * p)
  means = counts.reshape(num_resamples, p) @ values.T / p  # [R, M]
  return means.std(axis=0)


def bootstrap_std(values: np.ndarray, num_resamples: int = 1000, seed: int = 0) -> float:
  """`bootstrap_stds` of one metric's per-prompt values [P]."""
  values = np.asarray(values, np.float64)
  if values.ndim != 1:
    raise ValueError(f"bootstrap_std: values must be [P], got shape {values.shape}")
  return float(bootstrap_stds(values[None], num_resamples, seed)[0])
