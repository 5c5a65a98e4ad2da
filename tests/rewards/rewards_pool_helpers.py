"""Importable scoring functions for the pool tests (pool workers import them by name)."""

import math
import os
import time


def nan_reward(completion, record):
  """Returns NaN for "nan", inf for "inf", 1.5 for "big", raises for "raise", else 0.25."""
  if completion == "raise":
    raise ValueError("user function failed")
  return {"nan": math.nan, "inf": math.inf, "big": 1.5}.get(completion, 0.25)


def slow_or_dead(completion, record):
  """Sleeps for "hang", kills its own process for "die", else returns the record's reward."""
  if completion == "hang":
    time.sleep(60)
  if completion == "die":
    os._exit(3)
  return float(record["reward"])


def hostile_reward(completion, record):
  """What careless reward functions return: an int beyond float range, an `info` that is not a
  dict, a numeric string; "ok" -> 0.5."""
  return {
    "huge": 10**400,
    "badinfo": {"reward": 0.5, "info": 7},
    "string": "0.7",
  }.get(completion, 0.5)


def deadline_of(record):
  """The per-item deadline the record asks for (inf, 2**31 s, -1, "x", ...)."""
  return record.get("deadline", 5.0)
