"""Parsing the `arg` string of a config file (`--config=configs/default.py:method=grpo,runlocal=True`).

Like big_vision's `parse_arg`: the keys and their types come from the defaults, so
`runlocal=True` gives a bool and `steps=8` an int; an unknown key or a value of the wrong type
raises ValueError naming the key.
"""

from __future__ import annotations

import types

_TRUE = ("true", "1", "yes")
_FALSE = ("false", "0", "no")


def _typed(key: str, text: str, default):
  if isinstance(default, bool):
    if text.lower() in _TRUE:
      return True
    if text.lower() in _FALSE:
      return False
    raise ValueError(f"config argument {key} must be True or False, got {text!r}")
  if isinstance(default, (int, float)):
    try:
      return type(default)(text)
    except ValueError:
      raise ValueError(f"config argument {key} must be {type(default).__name__}, got {text!r}") from None
  return text


def parse_arg(arg: str | None, **defaults) -> types.SimpleNamespace:
  """'k1=v1,k2=v2' -> a namespace of every key of `defaults`, each value of its default's type."""
  out = dict(defaults)
  for item in filter(None, (arg or "").split(",")):
    if "=" not in item:
      raise ValueError(f"config argument {item!r} must be key=value (keys: {sorted(defaults)})")
    key, text = item.split("=", 1)
    if key not in defaults:
      raise ValueError(f"unknown config argument {key!r}; known: {sorted(defaults)}")
    out[key] = _typed(key, text, defaults[key])
  return types.SimpleNamespace(**out)
