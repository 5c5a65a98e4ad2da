"""Checkpoints with orbax's CheckpointManager: the train state, the frozen reference policy and the
data iterator's state, every `checkpoint.every` steps and on SIGTERM (preemption)."""

from __future__ import annotations

import os
import signal
import threading
from typing import Any

import jax
import numpy as np
import orbax.checkpoint as ocp


def _abstract(tree):
  return jax.tree.map(lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=x.sharding), tree)


class Checkpointer:
  """Saves and restores {"state", "reference" (optional), "data"} under `workdir/checkpoints`."""

  def __init__(self, workdir: str, max_to_keep: int = 2):
    self.directory = os.path.abspath(os.path.join(workdir, "checkpoints"))
    options = ocp.CheckpointManagerOptions(max_to_keep=max_to_keep, create=True)
    self.manager = ocp.CheckpointManager(self.directory, options=options)

  def latest_step(self) -> int | None:
    return self.manager.latest_step()

  def save(self, step: int, state: Any, data_state: dict, reference: Any = None) -> None:
    items = {"state": ocp.args.StandardSave(state), "data": ocp.args.JsonSave(data_state)}
    if reference is not None:
      items["reference"] = ocp.args.StandardSave(reference)
    self.manager.save(step, args=ocp.args.Composite(**items), force=True)

  def restore(self, step: int, state_like: Any, reference_like: Any = None) -> tuple[Any, dict, Any]:
    """(state, data_state, reference) of checkpoint `step`, placed with the shardings of the
    `*_like` trees (arrays or ShapeDtypeStructs with shardings)."""
    items = {"state": ocp.args.StandardRestore(_abstract(state_like)), "data": ocp.args.JsonRestore()}
    if reference_like is not None:
      items["reference"] = ocp.args.StandardRestore(_abstract(reference_like))
    out = self.manager.restore(step, args=ocp.args.Composite(**items))
    return out["state"], out["data"], out["reference"] if reference_like is not None else None

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
