"""The optax optimiser: AdamW under a warmup + cosine (or constant) schedule, clipped by global norm."""

from __future__ import annotations

from typing import Any, Mapping

import optax

SCHEDULES = ("cosine", "constant")


def learning_rate_schedule(
  lr: float, warmup_steps: int, total_steps: int, schedule: str = "cosine", end_lr_frac: float = 0.1
) -> optax.Schedule:
  """Linear warmup from 0 to `lr` over `warmup_steps` optimiser steps, then cosine decay to
  `lr * end_lr_frac` at `total_steps` (or constant)."""
  if schedule not in SCHEDULES:
    raise ValueError(f"optim.schedule must be one of {SCHEDULES}, got {schedule!r}")
  warmup_steps = max(0, int(warmup_steps))
  total_steps = max(int(total_steps), warmup_steps + 1)
  if schedule == "constant":
    after = optax.constant_schedule(lr)
  else:
    after = optax.cosine_decay_schedule(lr, total_steps - warmup_steps, alpha=end_lr_frac)
  if warmup_steps == 0:
    return after
  return optax.join_schedules([optax.linear_schedule(0.0, lr, warmup_steps), after], [warmup_steps])


def make_optimizer(
  optim: Mapping[str, Any], total_updates: int, lr: float | None = None, warmup_steps: int | None = None
) -> optax.GradientTransformation:
  """clip_by_global_norm(max_grad_norm) then AdamW(schedule) from the `optim` config section.

  total_updates: optimiser steps of the whole run (steps x epochs x minibatches).
  """
  sched = learning_rate_schedule(
    optim["lr"] if lr is None else lr,
    optim["warmup_steps"] if warmup_steps is None else warmup_steps,
    total_updates,
    optim["schedule"],
    optim["end_lr_frac"],
  )
  parts = []
  if optim["max_grad_norm"] and optim["max_grad_norm"] > 0:
    parts.append(optax.clip_by_global_norm(optim["max_grad_norm"]))
  parts.append(optax.adamw(sched, b1=optim["b1"], b2=optim["b2"], eps=optim["eps"], weight_decay=optim["weight_decay"]))
  return optax.chain(*parts)
