"""Seed 000's three layouts (docs/DESIGN.md section 3.9), a per-run table and a paired-difference
table, each as a `Table`: a title, a header and rows of display cells (for md / latex) and a
DataFrame (for csv: one row per method, per unit and method for Table 1, with `method`, `n_seeds`
and `<metric>_mean`, `<metric>_std` for every metric, the metric names being the logged ones).

"Acc" is `eval/reward_mean` at each run's last evaluation. Table 2's KL P95 is the batch-wide
`kl_p95`; Table 3's columns are over the low-variance updated groups (`lowvar_kl_mean`,
`lowvar_kl_p95`, `lowvar_inv_scale_p95`, `lowvar_inv_scale_p99`, and `r_over_kl`, `dir_cardinal`,
which the trainer computes on those groups), each averaged over the last 20% of the RL steps.
A cell is "mean ± std" over seeds; "[n=k]" marks a cell with fewer seeds than the table's most.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Sequence

import pandas as pd

from maxnorm_jax.analysis import aggregate

ACC = "eval/reward_mean"
CORE_BASELINES = ("rloo_protocol", "grpo", "grpo_beta_comp", "dr_grpo", "reinforce_pp")
TABLE1_METHODS = ("p90_protocol", "gopo", "maxnorm_dr_grpo", "maxnorm_rloo")
TABLE2_METHODS = (
  "grpo",
  "grpo_protocol",
  "rloo_protocol",
  "p90_protocol",
  "maxnorm_rloo_nobin",
  "maxnorm_rloo_protocol_off",
  "maxnorm_rloo",
)
# Table 3 column -> (metric over the low-variance updated groups, fallback for runs without it).
TABLE3_COLUMNS = {
  "Mean KL": ("lowvar_kl_mean", "kl_mean"),
  "KL P95": ("lowvar_kl_p95", "kl_p95"),
  "Inv P95": ("lowvar_inv_scale_p95", "inv_scale_p95"),
  "Inv P99": ("lowvar_inv_scale_p99", "inv_scale_p99"),
  "R/KL": ("r_over_kl", "r_over_kl"),
  "Dir": ("dir_cardinal", "dir_cardinal"),
}
RUN_COLUMNS = {
  "Acc": ACC,
  "best Acc": "best_" + ACC,
  "KL P95": "kl_p95",
  "Inv P99": "lowvar_inv_scale_p99",
  "ACR": "acr",
  "subres": "subres_frac",
  "small gap": "small_gap_frac",
  "low-var groups": "lowvar_groups",
}


@dataclasses.dataclass
class Table:
  title: str
  header: list[str]
  rows: list[list[str]]
  frame: pd.DataFrame
  notes: list[str] = dataclasses.field(default_factory=list)


def fmt(x: float) -> str:
  """A number for a table cell: 3 decimals, or scientific outside [1e-3, 1e3); "–" for NaN."""
  if x is None or (isinstance(x, float) and math.isnan(x)):
    return "–"
  a = abs(x)
  if a == 0:
    return "0"
  if a >= 1000 or a < 1e-3:
    return f"{x:.2e}"
  if a >= 100:
    return f"{x:.1f}"
  return f"{x:.3f}"


def _cell(row: pd.Series, metric: str, max_n: int) -> str:
  mean, std = row.get(f"{metric}_mean", math.nan), row.get(f"{metric}_std", math.nan)
  text = fmt(mean) if math.isnan(std) else f"{fmt(mean)} ± {fmt(std)}"
  if int(row["n_seeds"]) < max_n:
    text += f" [n={int(row['n_seeds'])}]"
  return text


def _yn(flag) -> str:
  return "Y" if bool(flag) else "N"


def method_order(methods: Sequence[str]) -> list[str]:
  """Table 2's rows, then Table 1's other rows, then any other method (sorted)."""
  known = list(TABLE2_METHODS) + [m for m in CORE_BASELINES + TABLE1_METHODS if m not in TABLE2_METHODS]
  present = set(methods)
  return [m for m in known if m in present] + sorted(present - set(known))


def _ordered(stats: pd.DataFrame, methods: Sequence[str]) -> pd.DataFrame:
  by = {m: i for i, m in enumerate(methods)}
  out = stats[stats["method"].isin(by)].copy()
  out["_order"] = out["method"].map(by)
  return out.sort_values(["unit", "_order"]).drop(columns="_order").reset_index(drop=True)


def _max_n(stats: pd.DataFrame) -> int:
  return int(stats["n_seeds"].max()) if len(stats) else 0


def table1(runs: pd.DataFrame) -> Table:
  """One row per unit: the strongest core baseline (by mean Acc, named), p90, GOPO, MaxNorm rows, Δ vs p90."""
  stats = aggregate.per_method(runs)
  max_n = _max_n(stats)
  header = ["Unit", "Best baseline", *TABLE1_METHODS, "Δ vs p90 [95% CI]"]
  rows, frames = [], []
  for unit, g in stats.groupby("unit", sort=True):
    g = g.set_index("method", drop=False)
    core = [m for m in CORE_BASELINES if m in g.index and not math.isnan(g.loc[m, f"{ACC}_mean"])]
    best = max(core, key=lambda m: g.loc[m, f"{ACC}_mean"]) if core else None
    row = [unit, f"{best}: {_cell(g.loc[best], ACC, max_n)}" if best else "–"]
    row += [_cell(g.loc[m], ACC, max_n) if m in g.index else "–" for m in TABLE1_METHODS]
    if {"maxnorm_rloo", "p90_protocol"} <= set(g.index):
      d = aggregate.paired_difference(runs, ACC, "p90_protocol", "maxnorm_rloo", unit=unit)
      row.append(f"{fmt(d.mean)} [{fmt(d.low)}, {fmt(d.high)}]")
    else:
      row.append("–")
    rows.append(row)
    part = _ordered(g.reset_index(drop=True), list(CORE_BASELINES) + list(TABLE1_METHODS))
    part.insert(2, "best_baseline", part["method"] == best)
    frames.append(part)
  frame = pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()
  notes = [f"Acc = {ACC} at the last evaluation; best baseline among {', '.join(CORE_BASELINES)}."]
  return Table("Table 1: Acc by unit (model x task)", header, rows, frame, notes)


def table2(runs: pd.DataFrame) -> Table:
  """The component ablation: Protocol / binning / ZG-skip flags (from config.json), Acc, KL P95."""
  stats = _ordered(aggregate.per_method(runs), TABLE2_METHODS)
  max_n = _max_n(stats)
  multi = stats["unit"].nunique() > 1
  header = (["Unit"] if multi else []) + ["Method", "Protocol", "Binning", "ZG skip", "Acc", "KL P95", "n"]
  rows = []
  for _, r in stats.iterrows():
    row = [r["unit"]] if multi else []
    row += [r["method"], _yn(r["protocol_gate"]), _yn(r["protocol_binning"]), _yn(r["zg_skip"])]
    row += [_cell(r, ACC, max_n), _cell(r, "kl_p95", max_n), str(int(r["n_seeds"]))]
    rows.append(row)
  notes = [f"Acc = {ACC} at the last evaluation; KL P95 = kl_p95 over the last 20% of RL steps."]
  return Table("Table 2: component ablation", header, rows, stats, notes)


def _table3_metric(stats: pd.DataFrame, primary: str, fallback: str) -> str:
  col = f"{primary}_mean"
  return primary if col in stats and stats[col].notna().any() else fallback


def table3(runs: pd.DataFrame) -> Table:
  """Per method: KL, inverse-scale tail, R/KL and Dir over the low-variance updated groups."""
  stats = aggregate.per_method(runs)
  stats = _ordered(stats, method_order(stats["method"]))
  max_n = _max_n(stats)
  metrics = {name: _table3_metric(stats, *cols) for name, cols in TABLE3_COLUMNS.items()}
  multi = stats["unit"].nunique() > 1
  header = (["Unit"] if multi else []) + ["Method", *metrics, "n"]
  rows = []
  for _, r in stats.iterrows():
    row = ([r["unit"]] if multi else []) + [r["method"]]
    row += [_cell(r, m, max_n) for m in metrics.values()] + [str(int(r["n_seeds"]))]
    rows.append(row)
  notes = ["Columns (logged names): " + ", ".join(f"{k} = {v}" for k, v in metrics.items()) + "; last 20% of RL steps."]
  return Table("Table 3: low-variance updated groups", header, rows, stats, notes)


def runs_table(runs: pd.DataFrame) -> Table:
  """One row per run: identity, completion and its headline numbers."""
  order = {m: i for i, m in enumerate(method_order(runs["method"]))}
  runs = runs.assign(_o=runs["method"].map(order)).sort_values(["unit", "_o", "seed"]).drop(columns="_o")
  cols = {k: v for k, v in RUN_COLUMNS.items() if v in runs}
  header = ["Unit", "Method", "Seed", "Steps", *cols]
  rows = []
  for _, r in runs.iterrows():
    steps = f"{int(r['steps'])}/{int(r['planned_steps'])}"
    rows.append([r["unit"], r["method"], str(int(r["seed"])), steps] + [fmt(float(r[v])) for v in cols.values()])
  return Table("Runs", header, rows, runs.reset_index(drop=True), [f"metrics as logged; {', '.join(cols.values())}"])


def paired_table(runs: pd.DataFrame, reference: str, metric: str = ACC) -> Table:
  """Every other method minus `reference` on `metric`, paired by seed, with bootstrap 95% intervals."""
  methods = [m for m in method_order(runs["method"]) if m != reference]
  header = ["Unit", "Method", f"{metric} − {reference}", "95% CI", "seeds", "per seed"]
  rows, records = [], []
  for unit in sorted(runs["unit"].unique()):
    present = set(runs.loc[runs["unit"] == unit, "method"])
    if reference not in present:
      continue
    for m in methods:
      if m not in present:
        continue
      d = aggregate.paired_difference(runs, metric, reference, m, unit=unit)
      per_seed = ", ".join(f"{s}:{fmt(x)}" for s, x in zip(d.seeds, d.differences))
      rows.append([unit, m, fmt(d.mean), f"[{fmt(d.low)}, {fmt(d.high)}]", str(len(d.differences)), per_seed])
      records.append(
        dict(
          unit=unit,
          method=m,
          reference=reference,
          metric=metric,
          n_seeds=len(d.differences),
          mean=d.mean,
          low=d.low,
          high=d.high,
        )
      )
  notes = [f"paired by seed; percentile bootstrap over seeds ({aggregate.N_BOOT} resamples)"]
  return Table(f"Paired differences vs {reference} ({metric})", header, rows, pd.DataFrame(records), notes)
