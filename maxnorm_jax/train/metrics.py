"""Metric writers: `workdir/metrics.jsonl` (one object per step), TensorBoard event files and a
progress bar with reward, KL and ACR; the lines a run prints (where it writes, each evaluation, the
SFT summary) and the progress bars of SFT and evaluation. Only process 0 writes."""

from __future__ import annotations

import json
import math
import os
import sys
import time
from typing import Any, Mapping, Sequence

import numpy as np

METRICS_FILE = "metrics.jsonl"


def _clean(value: Any) -> float | None:
  v = float(np.asarray(value))
  return None if math.isnan(v) or math.isinf(v) else v


def truncate_after(path: str, step: int) -> None:
  """Drops the lines of steps > `step` (what a killed run logged after its last checkpoint)."""
  if not os.path.exists(path):
    return
  with open(path) as f:
    lines = [ln for ln in f if ln.strip()]
  kept = [ln for ln in lines if json.loads(ln)["step"] <= step]
  with open(path + ".tmp", "w") as f:
    f.writelines(kept)
  os.replace(path + ".tmp", path)


class MetricWriter:
  """Writes scalar metrics per step. `resume_step`: the step a resumed run starts after."""

  def __init__(
    self,
    workdir: str,
    total_steps: int,
    *,
    enabled: bool = True,
    tensorboard: bool = True,
    progress: bool = True,
    resume_step: int = 0,
  ):
    self.enabled = enabled
    self.path = os.path.join(workdir, METRICS_FILE)
    self._tb = None
    self._bar = None
    if not enabled:
      return
    os.makedirs(workdir, exist_ok=True)
    truncate_after(self.path, resume_step)
    self._file = open(self.path, "a")
    if tensorboard:
      from tensorboardX import SummaryWriter

      self._tb = SummaryWriter(os.path.join(workdir, "tensorboard"))
    if progress:
      from tqdm import tqdm

      self._bar = tqdm(total=total_steps, initial=resume_step, desc="train", file=sys.stderr, dynamic_ncols=True)

  def write(self, step: int, metrics: Mapping[str, Any]) -> dict:
    """Appends one line {"step", "time", **metrics}; returns it (NaN/inf become null)."""
    row = {"step": int(step), "time": time.time()}
    row.update({k: _clean(v) for k, v in sorted(metrics.items())})
    if not self.enabled:
      return row
    self._file.write(json.dumps(row) + "\n")
    self._file.flush()
    if self._tb is not None:
      for k, v in row.items():
        if k not in ("step", "time") and v is not None:
          self._tb.add_scalar(k, v, step)
      self._tb.flush()
    if self._bar is not None and "reward_mean" in row:
      self._bar.set_postfix(
        {"reward": row.get("reward_mean"), "kl": row.get("kl_mean"), "acr": row.get("acr")}, refresh=False
      )
      self._bar.update(step - self._bar.n)
    return row

  def close(self) -> None:
    if not self.enabled:
      return
    self._file.close()
    if self._tb is not None:
      self._tb.close()
    if self._bar is not None:
      self._bar.close()


def progress_bar(iterable, total: int, desc: str, enabled: bool):
  """`iterable` wrapped in a tqdm bar on stderr when `enabled`, else unchanged."""
  if not enabled:
    return iterable
  from tqdm import tqdm

  return tqdm(iterable, total=total, desc=desc, file=sys.stderr, dynamic_ncols=True, leave=False)


def run_banner(workdir: str, tensorboard: bool) -> str:
  """Where a run writes, printed when it starts."""
  lines = [
    f"run directory: {workdir}",
    f"  metrics:     {os.path.join(workdir, METRICS_FILE)}",
    f"  checkpoints: {os.path.join(workdir, 'checkpoints')}",
    f"  cards:       {os.path.join(workdir, 'cards')}",
  ]
  if tensorboard:
    lines.append(f"  TensorBoard: tensorboard --logdir {os.path.join(workdir, 'tensorboard')}")
  return "\n".join(lines)


EVAL_SUMMARY_KEYS = ("eval/reward_mean", "eval/pass@k", "eval/pass@1", "eval/greedy_reward_mean")


def eval_line(step: int, metrics: Mapping[str, Any]) -> str:
  """One line of an evaluation's headline numbers (the default set), printed as it happens."""
  parts = [f"{k.split('/', 1)[1]} {metrics[k]:.3f}" for k in EVAL_SUMMARY_KEYS if metrics.get(k) is not None]
  return f"eval step {step}: " + ", ".join(parts)


def sft_line(losses: Sequence[float]) -> str:
  """The SFT warm start's summary line."""
  return f"SFT warm start: {len(losses)} steps, loss {losses[0]:.3f} -> {losses[-1]:.3f}"


def save_card(workdir: str, step: int, arrays: Mapping[str, np.ndarray]) -> str:
  """`workdir/cards/step_{step:06d}.npz` with the batch's rewards and advantage card."""
  directory = os.path.join(workdir, "cards")
  os.makedirs(directory, exist_ok=True)
  path = os.path.join(directory, f"step_{step:06d}.npz")
  np.savez(path, **{k: np.asarray(v) for k, v in arrays.items()})
  return path
