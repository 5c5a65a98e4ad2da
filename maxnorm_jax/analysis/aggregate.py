"""Across seeds: mean and std per (unit, method), and paired per-seed differences with a bootstrap.

    per_method(runs_frame)  -> one row per (unit, method): n_seeds, seeds, <metric>_mean, <metric>_std
    paired_difference(runs_frame, metric, reference, method) -> PairedDifference

The std is the sample std over seeds (ddof 1; NaN with one seed). The paired difference of
`method` minus `reference` is taken seed by seed over the seeds both have; its 95% interval is the
percentile bootstrap over those seeds (resampled with replacement, `n_boot` times, a fixed
generator), so with 3 seeds it can only span the observed per-seed differences.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pandas as pd

ID_COLUMNS = (
  "unit",
  "method",
  "seed",
  "workdir",
  "steps",
  "planned_steps",
  "complete",
  "last_eval_step",
  "protocol_gate",
  "protocol_binning",
  "zg_skip",
)
FLAG_COLUMNS = ("protocol_gate", "protocol_binning", "zg_skip")
N_BOOT = 10_000
BOOT_SEED = 0


def metric_columns(frame: pd.DataFrame) -> list[str]:
  """The numeric metric columns of a runs frame (every column but the identity ones)."""
  return [c for c in frame.columns if c not in ID_COLUMNS and pd.api.types.is_numeric_dtype(frame[c])]


def per_method(frame: pd.DataFrame) -> pd.DataFrame:
  """One row per (unit, method) with n_seeds, seeds ("0,1,2"), the Protocol flags and
  `<metric>_mean`, `<metric>_std` for every metric column, in the order the methods first appear."""
  metrics = metric_columns(frame)
  rows = []
  for (unit, method), g in frame.groupby(["unit", "method"], sort=False):
    row = {"unit": unit, "method": method, "n_seeds": len(g), "seeds": ",".join(str(s) for s in sorted(g["seed"]))}
    for flag in FLAG_COLUMNS:
      if flag in g:
        row[flag] = bool(g[flag].iloc[0])
    for m in metrics:
      values = g[m].to_numpy(np.float64)
      values = values[~np.isnan(values)]
      row[f"{m}_mean"] = float(values.mean()) if values.size else math.nan
      row[f"{m}_std"] = float(values.std(ddof=1)) if values.size > 1 else math.nan
    rows.append(row)
  return pd.DataFrame(rows)


@dataclasses.dataclass(frozen=True)
class PairedDifference:
  """`method` - `reference` on `metric`, seed by seed over the shared `seeds`."""

  metric: str
  reference: str
  method: str
  seeds: tuple[int, ...]
  differences: tuple[float, ...]
  mean: float
  low: float  # the bootstrap 2.5% quantile of the mean difference
  high: float  # the bootstrap 97.5% quantile


def bootstrap_interval(x: np.ndarray, n_boot: int = N_BOOT, seed: int = BOOT_SEED) -> tuple[float, float]:
  """The percentile-bootstrap 95% interval of the mean of `x` [n] (NaNs when n == 0)."""
  x = np.asarray(x, np.float64)
  if x.size == 0:
    return math.nan, math.nan
  rng = np.random.default_rng(seed)
  means = x[rng.integers(0, x.size, size=(n_boot, x.size))].mean(axis=1)
  return float(np.quantile(means, 0.025)), float(np.quantile(means, 0.975))


def paired_difference(
  frame: pd.DataFrame, metric: str, reference: str, method: str, unit: str | None = None
) -> PairedDifference:
  """The paired per-seed difference `method` - `reference` on `metric` (one unit: the only one, or `unit`)."""
  if metric not in frame:
    raise KeyError(f"no metric {metric!r} in the runs; have {sorted(metric_columns(frame))}")
  units = sorted(frame["unit"].unique()) if unit is None else [unit]
  if len(units) != 1:
    raise ValueError(f"the runs hold several units {units}; name one")
  f = frame[frame["unit"] == units[0]]
  for name in (reference, method):
    if name not in set(f["method"]):
      raise KeyError(f"no runs of method {name!r} in unit {units[0]!r}; have {sorted(set(f['method']))}")
  a = f[f["method"] == method].set_index("seed")[metric]
  b = f[f["method"] == reference].set_index("seed")[metric]
  seeds = sorted(set(a.index) & set(b.index))
  d = np.array([a[s] - b[s] for s in seeds], np.float64)
  d = d[~np.isnan(d)]
  low, high = bootstrap_interval(d)
  return PairedDifference(
    metric,
    reference,
    method,
    tuple(seeds),
    tuple(float(x) for x in d),
    float(d.mean()) if d.size else math.nan,
    low,
    high,
  )
