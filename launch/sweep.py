#!/usr/bin/env python3
"""A grid of method rows x seeds, each cell a run of maxnorm_jax.main in its own workdir.

  python launch/sweep.py --methods grpo,maxnorm_rloo --seeds 0,1,2 --workdir-root runs/sweep \\
      [--config configs/default.py] [--config-args runlocal=True] [--extra-args "--config.train.steps=8"] \\
      [--print | --pod tpu|cpu [--pod-args "..."]] [--keep-going]

Cell (method m, seed s) runs in <root>/<m>/seed<s>:

  python -m maxnorm_jax.main --config=<config>:method=m[,<config-args>] --workdir=<root>/m/seed<s> \\
      --config.seed=s <extra-args>

By default the cells run here one after another, stopping at the first failure (--keep-going runs
them all and reports the failures). Each cell ends finished (exit 0; main leaves FINISHED.json in
its workdir), unfinished (exit 75: SIGTERM stopped it after saving; the sweep stops there and
exits 75) or failed (any other code). Running the same sweep again skips the finished cells and
resumes the unfinished ones from their checkpoints. --print prints the commands instead; --pod tpu prints
launch/tpu_pod.sh commands (one slice per cell, named after it; --pod-args adds --zone,
--accelerator-type, ...), --pod cpu prints launch/cpu_pod.py commands (--pod-args replaces the
default "--processes 2 --devices-per-process 4").
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import re
import shlex
import subprocess
import sys
from typing import Callable, NamedTuple, Sequence

MAIN_MODULE = "maxnorm_jax.main"
#: main's exit status after a SIGTERM stop (maxnorm_jax.train.loop.PREEMPTED_EXIT_CODE).
PREEMPTED_EXIT_CODE = 75
#: What main writes into a workdir that reached train.steps (maxnorm_jax.train.loop.FINISHED_FILE).
FINISHED_FILE = "FINISHED.json"
CPU_POD_DEFAULT_ARGS = "--processes 2 --devices-per-process 4"


class Cell(NamedTuple):
  method: str
  seed: int
  workdir: str
  main_args: list[str]  # the arguments of maxnorm_jax.main


def load_methods(config_path: str) -> list[str]:
  """The row names of the METHODS dict of the config file at `config_path`."""
  if not os.path.isfile(config_path):
    raise ValueError(f"config file {config_path!r} not found")
  spec = importlib.util.spec_from_file_location("_sweep_config", config_path)
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  methods = getattr(module, "METHODS", None)
  if not isinstance(methods, dict):
    raise ValueError(f"{config_path} has no METHODS dict")
  return sorted(methods)


def split_list(text: str, what: str) -> list[str]:
  """Comma-separated, non-empty, without duplicates."""
  items = [x.strip() for x in text.split(",") if x.strip()]
  if not items:
    raise ValueError(f"--{what} is empty")
  dupes = sorted({x for x in items if items.count(x) > 1})
  if dupes:
    raise ValueError(f"--{what} repeats {', '.join(dupes)}")
  return items


def parse_seeds(text: str) -> list[int]:
  """'0,1,2' -> [0, 1, 2]."""
  seeds = []
  for s in split_list(text, "seeds"):
    try:
      seeds.append(int(s))
    except ValueError:
      raise ValueError(f"--seeds: {s!r} is not an integer") from None
  return seeds


def check_methods(methods: Sequence[str], known: Sequence[str]) -> None:
  """Raises naming every unknown method and listing the rows."""
  unknown = [m for m in methods if m not in known]
  if unknown:
    raise ValueError(f"unknown method(s) {', '.join(unknown)}; rows: {', '.join(known)}")


def make_cells(
  methods: Sequence[str],
  seeds: Sequence[int],
  workdir_root: str,
  config: str = "configs/default.py",
  config_args: str = "",
  extra_args: str = "",
) -> list[Cell]:
  """The grid, method-major: one Cell per (method, seed)."""
  config_args = config_args.strip().strip(",")
  if re.search(r"(^|,)\s*method\s*=", config_args):
    raise ValueError("--config-args must not set method (use --methods)")
  extra = shlex.split(extra_args)
  cells = []
  for m in methods:
    for s in seeds:
      workdir = os.path.join(workdir_root, m, f"seed{s}")
      spec = f"{config}:method={m}" + (f",{config_args}" if config_args else "")
      cells.append(Cell(m, s, workdir, [f"--config={spec}", f"--workdir={workdir}", f"--config.seed={s}", *extra]))
  return cells


def tpu_name(cell: Cell) -> str:
  """A TPU VM name for the cell: lowercase letters, digits, hyphens."""
  return re.sub(r"[^a-z0-9-]+", "-", f"maxnorm-{cell.method}-s{cell.seed}".lower()).strip("-")


def command(cell: Cell, pod: str | None = None, pod_args: str | None = None, python: str = "python") -> list[str]:
  """The command line of one cell: a local run, or a tpu_pod.sh / cpu_pod.py launch."""
  if pod is None:
    return [python, "-m", MAIN_MODULE, *cell.main_args]
  if pod == "tpu":
    extra = shlex.split(pod_args or "")
    name = [] if "--name" in extra else ["--name", tpu_name(cell)]
    return ["launch/tpu_pod.sh", *name, *extra, "--", *cell.main_args]
  if pod == "cpu":
    extra = shlex.split(CPU_POD_DEFAULT_ARGS if pod_args is None else pod_args)
    return [python, "launch/cpu_pod.py", *extra, "--", *cell.main_args]
  raise ValueError(f"unknown pod {pod!r}; choose tpu or cpu")


def cell_state(cell: Cell) -> str:
  """ "finished" (FINISHED.json in its workdir), "started" (a checkpoint or metrics exist) or "new"."""
  if os.path.isfile(os.path.join(cell.workdir, FINISHED_FILE)):
    return "finished"
  if any(os.path.exists(os.path.join(cell.workdir, n)) for n in ("checkpoints", "metrics.jsonl")):
    return "started"
  return "new"


def run_local(
  cells: Sequence[Cell],
  keep_going: bool = False,
  call: Callable[[list[str]], int] = subprocess.call,
  log: Callable[[str], None] = print,
) -> int:
  """Runs the cells one after another, skipping finished ones (started ones resume); returns 0, 75
  when a cell was preempted (unfinished: the sweep stops, run it again to resume), or the exit code
  of the (first) failure."""
  failures: list[tuple[Cell, int]] = []
  for k, cell in enumerate(cells):
    state = cell_state(cell)
    where = f"[{k + 1}/{len(cells)}] method={cell.method} seed={cell.seed}"
    if state == "finished":
      log(f"sweep: {where}: finished already ({cell.workdir}), skipped")
      continue
    cmd = command(cell, python=sys.executable)
    log(f"sweep: {where}: {'resuming: ' if state == 'started' else ''}{shlex.join(cmd)}")
    rc = call(cmd)
    if rc == PREEMPTED_EXIT_CODE:
      log(
        f"sweep: cell method={cell.method} seed={cell.seed} is unfinished (preempted, its step saved); "
        "stopping; run the same sweep again to resume it"
      )
      return PREEMPTED_EXIT_CODE
    if rc != 0:
      failures.append((cell, rc))
      log(f"sweep: cell method={cell.method} seed={cell.seed} failed with exit code {rc} (workdir {cell.workdir})")
      if not keep_going:
        return rc
  if failures:
    log(
      f"sweep: {len(failures)} of {len(cells)} cells failed: "
      + ", ".join(f"method={c.method} seed={c.seed} (code {rc})" for c, rc in failures)
    )
    return failures[0][1]
  return 0


VALUE_FLAGS = ("--extra-args", "--pod-args", "--config-args")


def join_values(argv: Sequence[str]) -> list[str]:
  """`--extra-args "--x=1"` -> `--extra-args=--x=1`, so argparse takes a value that starts with --."""
  out, i = [], 0
  while i < len(argv):
    if argv[i] in VALUE_FLAGS and i + 1 < len(argv):
      out.append(f"{argv[i]}={argv[i + 1]}")
      i += 2
    else:
      out.append(argv[i])
      i += 1
  return out


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
  parser = argparse.ArgumentParser(prog="sweep.py", description="Method rows x seeds of maxnorm_jax.main.")
  parser.add_argument("--methods", required=True, help="comma-separated rows of METHODS in the config")
  parser.add_argument("--seeds", required=True, help="comma-separated integers")
  parser.add_argument("--workdir-root", required=True, help="cell workdirs are ROOT/METHOD/seedSEED")
  parser.add_argument("--config", default="configs/default.py", help="config file (default configs/default.py)")
  parser.add_argument("--config-args", default="", help="more config arguments, e.g. runlocal=True,task=arith")
  parser.add_argument("--extra-args", default="", help='more arguments for main, e.g. "--config.train.steps=8"')
  mode = parser.add_mutually_exclusive_group()
  mode.add_argument("--print", action="store_true", help="print the commands, run nothing")
  mode.add_argument("--pod", choices=("tpu", "cpu"), help="print pod launch commands, run nothing")
  parser.add_argument(
    "--pod-args",
    default=None,
    help=f'flags of the pod launcher (tpu: --zone ..., cpu: replaces the default "{CPU_POD_DEFAULT_ARGS}")',
  )
  parser.add_argument("--keep-going", action="store_true", help="run every cell even after a failure")
  ns = parser.parse_args(join_values(sys.argv[1:] if argv is None else argv))
  if ns.pod_args is not None and ns.pod is None:
    parser.error("--pod-args needs --pod")
  try:
    ns.method_list = split_list(ns.methods, "methods")
    ns.seed_list = parse_seeds(ns.seeds)
    check_methods(ns.method_list, load_methods(ns.config))
    ns.cells = make_cells(ns.method_list, ns.seed_list, ns.workdir_root, ns.config, ns.config_args, ns.extra_args)
  except ValueError as e:
    parser.error(str(e))
  return ns


def main(argv: Sequence[str] | None = None) -> int:
  ns = parse_args(argv)
  if ns.print or ns.pod:
    for cell in ns.cells:
      print(shlex.join(command(cell, ns.pod, ns.pod_args)))
    return 0
  return run_local(ns.cells, keep_going=ns.keep_going)


if __name__ == "__main__":
  sys.exit(main())
