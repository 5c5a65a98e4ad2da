"""python -m maxnorm_jax.analysis --root runs/sweep --table 1|2|3|runs|paired --format md|latex|csv

Reads a sweep root (root/<method>/seed<s>/) and/or workdirs given with --runs, and prints one
table. `--table paired` prints every method minus `--reference` on `--metric`, paired by seed.
"""

from __future__ import annotations

import argparse
import sys
from typing import Sequence

from maxnorm_jax import analysis

TABLES = ("1", "2", "3", "runs", "paired")


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
  p = argparse.ArgumentParser(prog="python -m maxnorm_jax.analysis", description=__doc__.splitlines()[2])
  p.add_argument("--root", default=None, help="sweep root holding <method>/seed<s>/ workdirs")
  p.add_argument("--runs", nargs="*", default=[], help="more workdirs")
  p.add_argument("--table", choices=TABLES, default="2")
  p.add_argument("--format", choices=analysis.FORMATS, default="md")
  p.add_argument("--reference", default="maxnorm_rloo", help="reference method of --table paired")
  p.add_argument("--metric", default=analysis.ACC, help="metric of --table paired (a logged name)")
  p.add_argument("--include-incomplete", action="store_true", help="also use runs that did not finish")
  p.add_argument("--tail-frac", type=float, default=analysis.TAIL_FRAC, help="last fraction of RL steps averaged")
  ns = p.parse_args(argv)
  if not ns.root and not ns.runs:
    p.error("give --root and/or --runs")
  if not 0 < ns.tail_frac <= 1:
    p.error(f"--tail-frac must be in (0, 1], got {ns.tail_frac}")
  return ns


def build(ns: argparse.Namespace) -> analysis.Table:
  runs = analysis.load_runs(ns.root, ns.runs, include_incomplete=ns.include_incomplete, tail_frac=ns.tail_frac)
  if ns.table == "1":
    return analysis.table1(runs)
  if ns.table == "2":
    return analysis.table2(runs)
  if ns.table == "3":
    return analysis.table3(runs)
  if ns.table == "runs":
    return analysis.runs_table(runs)
  return analysis.paired_table(runs, ns.reference, ns.metric)


def main(argv: Sequence[str] | None = None) -> int:
  ns = parse_args(argv)
  try:
    table = build(ns)
  except (FileNotFoundError, KeyError, ValueError) as e:
    print(f"error: {e}", file=sys.stderr)
    return 2
  sys.stdout.write(analysis.render(table, ns.format))
  return 0


if __name__ == "__main__":
  sys.exit(main())
