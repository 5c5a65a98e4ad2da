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


class ConstantVerifier:
  """A user verifier registered in TASK_VERIFIERS by a test (importable, so workers can use it)."""

  def score(self, completion, record):
    from maxnorm_jax.rewards import Score

    return Score(0.625, 0.125, {"user": True})


def allocate(completion, record):
  """Allocates record["mb"] MiB and returns 0.5 (a verifier blowing up on one input)."""
  block = bytearray(int(record["mb"]) << 20)
  return 0.5 if len(block) else 0.0
