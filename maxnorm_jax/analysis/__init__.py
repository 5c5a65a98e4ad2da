"""Host-side analysis of trainer runs: a sweep root (or any workdirs) -> seed 000's tables.

    from maxnorm_jax import analysis
    runs = analysis.load_runs(root="runs/sweep")            # DataFrame, one row per complete run
    print(analysis.render(analysis.table2(runs), "md"))
    d = analysis.paired_difference(runs, "eval/reward_mean", "p90_protocol", "maxnorm_rloo")

CLI: python -m maxnorm_jax.analysis --root runs/sweep --table 1|2|3|runs|paired --format md|latex|csv
"""

from __future__ import annotations

from typing import Sequence

import pandas as pd

from maxnorm_jax.analysis.aggregate import PairedDifference, bootstrap_interval, paired_difference, per_method
from maxnorm_jax.analysis.curves import method_bands, seed_band
from maxnorm_jax.analysis.render import FORMATS, render
from maxnorm_jax.analysis.runs import TAIL_FRAC, find_runs, summarize_run, summarize_runs, tail_steps
from maxnorm_jax.analysis.tables import ACC, Table, paired_table, runs_table, table1, table2, table3


def load_runs(
  root: str | None = None, workdirs: Sequence[str] = (), include_incomplete: bool = False, tail_frac: float = TAIL_FRAC
) -> pd.DataFrame:
  """One row per run (`summarize_run`) of the sweep `root` and/or the given workdirs.

  Runs that have not logged their last planned step are left out unless `include_incomplete`.
  Raises ValueError when no run is left.
  """
  dirs = (find_runs(root) if root else []) + list(workdirs)
  rows = summarize_runs(dirs, tail_frac)
  if not include_incomplete:
    rows = [r for r in rows if r["complete"]]
  if not rows:
    where = root or ", ".join(workdirs) or "(nothing given)"
    raise ValueError(f"no {'' if include_incomplete else 'complete '}runs under {where}")
  return pd.DataFrame(rows)


__all__ = [
  "ACC",
  "FORMATS",
  "PairedDifference",
  "Table",
  "bootstrap_interval",
  "find_runs",
  "load_runs",
  "method_bands",
  "paired_difference",
  "paired_table",
  "per_method",
  "render",
  "runs_table",
  "seed_band",
  "summarize_run",
  "summarize_runs",
  "table1",
  "table2",
  "table3",
  "tail_steps",
]
