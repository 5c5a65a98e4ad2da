"""One row per run: where the runs are, and what each one ends with.

A run is a trainer workdir (`maxnorm_jax.train.run_data` describes its files). `find_runs(root)`
finds the workdirs of a sweep root laid out as `root/<method>/seed<s>/` (what `launch/sweep.py`
writes); `summarize_run(workdir)` reduces one run to a flat dict:

* identity: `method`, `seed`, `unit` ("<model preset> x <task>"), `workdir`, `steps` (last RL step
  logged), `planned_steps` (config `train.steps`), `complete` (the last planned step was logged);
* the Protocol as the run was configured: `protocol_gate`, `protocol_binning`, `zg_skip` (bools);
* every `eval/...` metric at the last evaluation (whatever names the run logged), and `best_<name>`,
  the highest value over its evaluations (not for `_std`, `_n` and `train_overlap` names);
* every other logged metric (not `time/`, `sft/`, `time`) averaged over the last `tail_frac` of the
  RL steps, NaN entries skipped: `kl_mean`, `acr`, `r_over_kl`, `lowvar_inv_scale_p99`, ...
"""

from __future__ import annotations

import math
import os
import re
from typing import Any, Iterable

import numpy as np

from maxnorm_jax.train import run_data

TAIL_FRAC = 0.2
EVAL_PREFIX = "eval/"
_SKIP_PREFIXES = ("time/", "sft/", EVAL_PREFIX)
_NO_BEST_SUFFIXES = ("_std", "_n", "train_overlap")
_SEED_DIR = re.compile(r"^seed(\d+)$")


def find_runs(root: str) -> list[str]:
  """The workdirs `root/<method>/seed<s>/` holding a metrics.jsonl, sorted by method then seed."""
  if not os.path.isdir(root):
    raise FileNotFoundError(f"sweep root {root!r} is not a directory")
  found = []
  for method in sorted(os.listdir(root)):
    mdir = os.path.join(root, method)
    if method.startswith(".") or not os.path.isdir(mdir):
      continue
    for name in os.listdir(mdir):
      m = _SEED_DIR.match(name)
      workdir = os.path.join(mdir, name)
      if m and os.path.isfile(os.path.join(workdir, run_data.METRICS_FILE)):
        found.append((method, int(m.group(1)), workdir))
  return [w for _, _, w in sorted(found)]


def tail_steps(steps: np.ndarray, frac: float = TAIL_FRAC) -> np.ndarray:
  """[T] bool: the RL steps (> 0) in the last `frac` of the run (at least one step)."""
  rl = steps[steps > 0]
  if rl.size == 0:
    return np.zeros(steps.shape, bool)
  last = int(rl.max())
  n = max(1, int(math.ceil(frac * last - 1e-9)))
  return steps > last - n


def _nanmean(x: np.ndarray) -> float:
  x = x[~np.isnan(x)]
  return float(x.mean()) if x.size else math.nan


def _identity(workdir: str, config: dict[str, Any]) -> dict[str, Any]:
  seed_dir = _SEED_DIR.match(os.path.basename(os.path.normpath(workdir)))
  method = config.get("method") or os.path.basename(os.path.dirname(os.path.normpath(workdir)))
  seed = config.get("seed", int(seed_dir.group(1)) if seed_dir else -1)
  preset = run_data.config_value(config, "model.preset", "model")
  return {
    "method": str(method),
    "seed": int(seed),
    "unit": f"{preset} x {config.get('task', 'task')}",
    "workdir": os.fspath(workdir),
    "protocol_gate": bool(run_data.config_value(config, "protocol.gate", False)),
    "protocol_binning": bool(run_data.config_value(config, "protocol.binning", False)),
    "zg_skip": run_data.config_value(config, "protocol.zero_group", "keep") == "skip",
  }


def summarize_run(workdir: str, tail_frac: float = TAIL_FRAC) -> dict[str, Any]:
  """The flat summary of one run (see the module docstring)."""
  config = run_data.load_config(workdir)
  metrics = run_data.load_metrics(workdir)
  steps = metrics["step"]
  out = _identity(workdir, config)
  out["steps"] = int(steps.max()) if steps.size else 0
  out["planned_steps"] = int(run_data.config_value(config, "train.steps", out["steps"]))
  out["complete"] = out["steps"] >= out["planned_steps"]
  tail = tail_steps(steps, tail_frac)
  eval_names = [k for k in metrics if k.startswith(EVAL_PREFIX)]
  evaluated = np.zeros(steps.shape, bool)
  for name in eval_names:
    evaluated |= ~np.isnan(metrics[name])
  last_eval = int(np.flatnonzero(evaluated)[-1]) if evaluated.any() else None
  out["last_eval_step"] = int(steps[last_eval]) if last_eval is not None else -1
  for name in eval_names:
    values = metrics[name]
    out[name] = float(values[last_eval]) if last_eval is not None else math.nan
    if not name.endswith(_NO_BEST_SUFFIXES):
      finite = values[~np.isnan(values)]
      out["best_" + name] = float(finite.max()) if finite.size else math.nan
  for name, values in metrics.items():
    if name in ("step", "time") or name.startswith(_SKIP_PREFIXES):
      continue
    out[name] = _nanmean(values[tail])
  return out


def summarize_runs(workdirs: Iterable[str], tail_frac: float = TAIL_FRAC) -> list[dict[str, Any]]:
  """`summarize_run` of each workdir, in order."""
  return [summarize_run(w, tail_frac) for w in workdirs]
