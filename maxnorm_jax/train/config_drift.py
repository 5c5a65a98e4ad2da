"""Config drift on resume: the config stored with a checkpoint against the one a resumed run got.

A resumed run must be the same experiment: any changed key refuses the resume (naming every
change), except the operational keys of IGNORED_ON_RESUME (logging, checkpoint cadence, worker
count) and the keys the user lists in `checkpoint.allow_changed` (e.g. "train.steps" to extend a
finished run).
"""

from __future__ import annotations

import json
from typing import Any

#: Keys (or section prefixes ending in ".") whose change never alters what is trained.
IGNORED_ON_RESUME = (
  "log.",
  "checkpoint.every",
  "checkpoint.max_to_keep",
  "checkpoint.on_preemption",
  "checkpoint.allow_changed",
  "reward.num_workers",
)

_ABSENT = "<absent>"


def plain(config: Any) -> dict:
  """The config as JSON values (tuples become lists), as stored in the checkpoint."""
  d = config.to_dict() if hasattr(config, "to_dict") else dict(config)
  return json.loads(json.dumps(d, default=str))


def flatten(d: dict, prefix: str = "") -> dict[str, Any]:
  """{"a": {"b": 1}} -> {"a.b": 1}."""
  out: dict[str, Any] = {}
  for k, v in d.items():
    key = f"{prefix}{k}"
    if isinstance(v, dict) and v:
      out.update(flatten(v, key + "."))
    else:
      out[key] = v
  return out


def allowed_keys(text: str) -> tuple[str, ...]:
  """ "train.steps, eval.every" -> ("train.steps", "eval.every")."""
  return tuple(k.strip() for k in (text or "").split(",") if k.strip())


def _ignored(key: str, allowed: tuple[str, ...]) -> bool:
  for k in IGNORED_ON_RESUME + allowed:
    if key == k or (k.endswith(".") and key.startswith(k)):
      return True
  return False


def differences(saved: dict, current: dict, allowed: tuple[str, ...] = ()) -> list[str]:
  """Lines "key: saved -> current" for every changed key that is neither ignored nor allowed."""
  a, b = flatten(saved), flatten(current)
  out = []
  for key in sorted(set(a) | set(b)):
    old, new = a.get(key, _ABSENT), b.get(key, _ABSENT)
    if old != new and not _ignored(key, allowed):
      out.append(f"{key}: {old!r} -> {new!r}")
  return out
