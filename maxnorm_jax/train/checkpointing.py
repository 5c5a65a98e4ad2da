"""Checkpoints with orbax's CheckpointManager: the train state, the frozen reference policy and the
data iterator's state, every `checkpoint.every` steps and on SIGTERM (preemption).

Each step also stores "meta": a fingerprint of the state and reference arrays (train/fingerprint.py)
and the run's config. `restore_intact` tries the steps newest to oldest and takes the first one that
reads, is finite and matches its fingerprint; each step it skips gets one log line saying why and
is moved aside to `checkpoints_rejected/<step>` (kept for inspection, never deleted, and out of the
way of orbax's `max_to_keep`, which would otherwise delete intact older steps in its favour).
"""

from __future__ import annotations

import dataclasses
import logging
import os
import shutil
import signal
import threading
from typing import Any

import jax
import numpy as np
import orbax.checkpoint as ocp

from maxnorm_jax.train import fingerprint

log = logging.getLogger("maxnorm_jax.train")


def _abstract(tree):
  return jax.tree.map(lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=x.sharding), tree)


class NoIntactCheckpoint(RuntimeError):
  """Every checkpoint of the workdir failed to read or verify."""


@dataclasses.dataclass
class Restored:
  step: int
  state: Any
  data_state: dict
  reference: Any
  config: dict | None  # the config stored with the step (None for a step saved without one)
  skipped: list[str]  # "step N: why" for each newer step that was not intact


class NotIntact(ValueError):
  """A checkpoint step that reads but holds non-finite or altered arrays."""


def _first_line(e: BaseException) -> str:
  lines = str(e).strip().splitlines()
  text = lines[0][:300] if lines else ""
  return text if isinstance(e, NotIntact) else f"unreadable ({type(e).__name__}: {text})"


class Checkpointer:
  """Saves and restores {"state", "reference" (optional), "data", "meta"} under `workdir/checkpoints`."""

  def __init__(self, workdir: str, max_to_keep: int = 2):
    self.directory = os.path.abspath(os.path.join(workdir, "checkpoints"))
    self.rejected_directory = os.path.abspath(os.path.join(workdir, "checkpoints_rejected"))
    self._options = ocp.CheckpointManagerOptions(max_to_keep=max_to_keep, create=True)
    self.manager = ocp.CheckpointManager(self.directory, options=self._options)

  def latest_step(self) -> int | None:
    return self.manager.latest_step()

  def save(self, step: int, state: Any, data_state: dict, reference: Any = None, config: dict | None = None) -> None:
    meta = {"fingerprint": {"state": fingerprint.fingerprint(state)}, "config": config}
    items = {"state": ocp.args.StandardSave(state), "data": ocp.args.JsonSave(data_state)}
    if reference is not None:
      items["reference"] = ocp.args.StandardSave(reference)
      meta["fingerprint"]["reference"] = fingerprint.fingerprint(reference)
    items["meta"] = ocp.args.JsonSave(meta)
    self.manager.save(step, args=ocp.args.Composite(**items), force=True)

  def _read_verified(self, step: int, state_like: Any, reference_like: Any) -> Restored:
    """Restores `step` and checks it; raises NotIntact (or orbax's error) saying why it is not intact."""
    has_meta = os.path.isdir(os.path.join(self.directory, str(step), "meta"))
    items = {"state": ocp.args.StandardRestore(_abstract(state_like)), "data": ocp.args.JsonRestore()}
    if reference_like is not None:
      items["reference"] = ocp.args.StandardRestore(_abstract(reference_like))
    if has_meta:
      items["meta"] = ocp.args.JsonRestore()
    out = self.manager.restore(step, args=ocp.args.Composite(**items))
    meta = out["meta"] if has_meta else {}
    prints = meta.get("fingerprint", {})
    if not has_meta:
      log.warning("checkpoint step %d has no fingerprint (saved by an older version): only finiteness is checked", step)
    problem = fingerprint.check(out["state"], prints.get("state") if has_meta else None)
    if problem is None and reference_like is not None:
      problem = fingerprint.check(out["reference"], prints.get("reference") if has_meta else None)
    if problem is not None:
      raise NotIntact(problem)
    reference = out["reference"] if reference_like is not None else None
    return Restored(step, out["state"], out["data"], reference, meta.get("config"), [])

  def restore_step(self, step: int, state_like: Any, reference_like: Any = None) -> Restored:
    """Restores and verifies one given `step`; raises NotIntact (or orbax's error) saying why it is not intact."""
    return self._read_verified(step, state_like, reference_like)

  def restore_intact(self, state_like: Any, reference_like: Any = None) -> Restored | None:
    """The newest step that reads and verifies (None when there is no checkpoint at all); newer
    steps that fail are logged, one line each, and moved to `checkpoints_rejected/`. Raises
    NoIntactCheckpoint when every step fails."""
    steps = sorted(self.manager.all_steps(), reverse=True)
    if not steps:
      return None
    skipped: list[str] = []
    for step in steps:
      try:
        restored = self._read_verified(step, state_like, reference_like)
      except Exception as e:  # unreadable (truncated, manifest gone) or not intact
        why = _first_line(e)
        log.warning("checkpoint step %d skipped: %s", step, why)
        skipped.append(f"step {step}: {why}")
        continue
      if skipped:
        self._set_aside([int(s.split(":")[0].split()[1]) for s in skipped])
      restored.skipped = skipped
      return restored
    raise NoIntactCheckpoint(
      f"no intact checkpoint in {self.directory} (nothing was changed there): " + "; ".join(skipped)
    )

  def _set_aside(self, steps: list[int]) -> None:
    """Moves the given step folders to `checkpoints_rejected/` and reloads the manager."""
    self.manager.wait_until_finished()
    if jax.process_index() == 0:
      os.makedirs(self.rejected_directory, exist_ok=True)
      for step in steps:
        target = os.path.join(self.rejected_directory, str(step))
        if os.path.exists(target):
          shutil.rmtree(target)
        shutil.move(os.path.join(self.directory, str(step)), target)
        log.warning("checkpoint step %d moved to %s", step, target)
    if jax.process_count() > 1:
      from jax.experimental import multihost_utils

      multihost_utils.sync_global_devices("maxnorm_checkpoints_set_aside")
    self.manager.close()
    self.manager = ocp.CheckpointManager(self.directory, options=self._options)

  def wait(self) -> None:
    self.manager.wait_until_finished()

  def close(self) -> None:
    self.manager.wait_until_finished()
    self.manager.close()


class PreemptionFlag:
  """Set by SIGTERM; `agreed()` is True on every process once any process got the signal (a host
  collective when there are several, so all of them save the same step)."""

  def __init__(self, install: bool = True):
    self._event = threading.Event()
    self._previous = None
    if install and threading.current_thread() is threading.main_thread():
      self._previous = signal.signal(signal.SIGTERM, self._handler)

  def _handler(self, signum, frame):
    self._event.set()

  def set(self) -> None:
    self._event.set()

  def is_set(self) -> bool:
    """This process got SIGTERM (no collective; for waits that must not block a stop)."""
    return self._event.is_set()

  def agreed(self) -> bool:
    local = self._event.is_set()
    if jax.process_count() == 1:
      return local
    from jax.experimental import multihost_utils

    flags = multihost_utils.process_allgather(np.asarray([local], np.int32))
    return bool(np.any(flags))

  def restore(self) -> None:
    if self._previous is not None:
      signal.signal(signal.SIGTERM, self._previous)
      self._previous = None
