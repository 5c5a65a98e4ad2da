"""The score every verifier returns, and the gate that keeps bad rewards away from the estimator.

A `Score` carries `reward` in [0, 1], its `resolution` (the smallest reward gap the verifier can
express: 1.0 for a binary verifier, 1/k for a k-step grid) and `info`, a dict saying why (parsed
answer, tests passed, timeout, crash). Users plug in their own reward functions; whatever they
return passes through `check_reward`, which turns a NaN, an infinity, a non-number or a value
outside [0, 1] into a rejected score (`valid=False`, counted in `RejectionCounter`) so that it is
never handed to the advantage estimator as a reward.
"""

from __future__ import annotations

import dataclasses
import math
import threading
from typing import Any


@dataclasses.dataclass(frozen=True)
class Score:
  """One verifier verdict.

  Attributes:
    reward: the reward in [0, 1]; 0.0 (a placeholder, not a reward) when `valid` is False.
    resolution: the smallest credible reward gap of this verifier (Reward-Resolution Protocol).
    info: why this reward: parsed answer, tests passed, timeout, crash, rejection reason.
    valid: False when the reward was rejected or could not be computed; such a completion must
      leave the estimator's mask, not enter it with reward 0.
  """

  reward: float
  resolution: float = 1.0
  info: dict[str, Any] = dataclasses.field(default_factory=dict)
  valid: bool = True


class RejectionCounter:
  """A thread-safe count of rejected rewards, by reason ("nan", "inf", "out_of_range", "type", "info",
  "resolution", "error")."""

  def __init__(self):
    self._lock = threading.Lock()
    self._counts: dict[str, int] = {}

  def add(self, reason: str) -> None:
    with self._lock:
      self._counts[reason] = self._counts.get(reason, 0) + 1

  @property
  def total(self) -> int:
    with self._lock:
      return sum(self._counts.values())

  def counts(self) -> dict[str, int]:
    with self._lock:
      return dict(self._counts)

  def reset(self) -> None:
    with self._lock:
      self._counts.clear()


#: Process-wide count of every reward `check_reward` rejected (the trainer logs it).
REJECTED = RejectionCounter()


def _reject(reason: str, raw: Any, info: dict[str, Any], counter: RejectionCounter | None) -> Score:
  (counter or REJECTED).add(reason)
  if counter is not None and counter is not REJECTED:
    REJECTED.add(reason)
  info = dict(info)
  info["rejected"] = reason
  info["raw_reward"] = repr(raw)
  return Score(reward=0.0, resolution=1.0, info=info, valid=False)


def check_reward(value: Any, counter: RejectionCounter | None = None) -> Score:
  """Validates what a reward function returned and wraps it into a `Score`.

  Accepts a `Score`, a plain number, or a dict with a "reward" key (and optional "resolution",
  "info"). Rejects (valid=False, counted in `counter` and the global `REJECTED`): values that are
  not real numbers (strings, bytes, None, complex), NaN, +-inf, values outside [0, 1] (integers
  too large for a float included), an `info` that is not a dict, and a resolution that is not a
  finite number in (0, 1]. An already invalid Score passes through unchanged. Never raises.
  """
  if isinstance(value, Score):
    if not value.valid:
      return value
    raw, resolution, info = value.reward, value.resolution, value.info
  elif isinstance(value, dict) and "reward" in value:
    raw, resolution, info = value["reward"], value.get("resolution", 1.0), value.get("info", {})
  else:
    raw, resolution, info = value, 1.0, {}
  if not isinstance(info, dict):
    return _reject("info", info, {}, counter)
  if isinstance(raw, (str, bytes, bytearray, complex)):
    return _reject("type", raw, info, counter)
  try:
    reward = float(raw)
  except OverflowError:  # an integer beyond the float range
    return _reject("out_of_range", raw, info, counter)
  except (TypeError, ValueError):
    return _reject("type", raw, info, counter)
  if math.isnan(reward):
    return _reject("nan", raw, info, counter)
  if math.isinf(reward):
    return _reject("inf", raw, info, counter)
  if not 0.0 <= reward <= 1.0:
    return _reject("out_of_range", raw, info, counter)
  if isinstance(resolution, (str, bytes, bytearray, complex)):
    return _reject("resolution", resolution, info, counter)
  try:
    resolution = float(resolution)
  except (TypeError, ValueError, OverflowError):
    return _reject("resolution", resolution, info, counter)
  if not (math.isfinite(resolution) and 0.0 < resolution <= 1.0):
    return _reject("resolution", resolution, info, counter)
  return Score(reward=reward, resolution=resolution, info=info, valid=True)
