"""Per-method curves across seeds: the mean and std of a metric at each step the seeds share.

    seed_band(workdirs, "kl_mean") -> (steps [K], mean [K], std [K])

A step enters when every seed logged the metric there (NaN entries are not logged values), so a
band never mixes a different number of seeds along the curve. std is over seeds (ddof 0; 0 for one
seed, so a single seed draws a line without a band).
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

from maxnorm_jax.train import run_data


def seed_band(workdirs: Sequence[str], metric: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
  series = [run_data.metric_series(run_data.load_metrics(w), metric) for w in workdirs]
  if not series:
    return np.zeros(0, np.int64), np.zeros(0), np.zeros(0)
  shared = set(series[0][0].tolist())
  for steps, _ in series[1:]:
    shared &= set(steps.tolist())
  steps = np.array(sorted(shared), np.int64)
  values = np.stack([v[np.searchsorted(s, steps)] for s, v in series]) if steps.size else np.zeros((len(series), 0))
  return steps, values.mean(axis=0), values.std(axis=0)


def method_bands(runs, metric: str) -> dict[str, tuple[np.ndarray, np.ndarray, np.ndarray]]:
  """{method: seed_band(its workdirs, metric)} for a runs frame (`load_runs`), methods with data only."""
  out = {}
  for method, g in runs.groupby("method", sort=False):
    band = seed_band(list(g["workdir"]), metric)
    if band[0].size:
      out[method] = band
  return out
