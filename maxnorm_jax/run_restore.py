"""A saved run brought back: its config (DIR/config.json) and a Trainer holding the weights of one
of its checkpoints (the shared start of `maxnorm_jax.evaluate` and `maxnorm_jax.export`)."""

from __future__ import annotations

import json
import os

import ml_collections as mlc


def run_config(workdir: str) -> mlc.ConfigDict:
  """The config a run was started with (DIR/config.json)."""
  path = os.path.join(workdir, "config.json")
  if not os.path.exists(path):
    raise FileNotFoundError(f"--workdir={workdir}: no config.json; is it a run directory of maxnorm_jax.main?")
  with open(path) as f:
    return mlc.ConfigDict(json.load(f))


def restored_trainer(config, workdir: str, step: int | None):
  """(Trainer of `config` in `workdir` holding the weights of checkpoint `step`, the step); step None:
  the latest. Raises FileNotFoundError naming the steps that exist."""
  from maxnorm_jax.train import Trainer

  trainer = Trainer(config, workdir)
  try:
    steps = sorted(trainer.checkpointer.manager.all_steps())
    if not steps:
      raise FileNotFoundError(f"--workdir={workdir}: no checkpoints under {trainer.checkpointer.directory}")
    step = steps[-1] if step is None else step
    if step not in steps:
      raise FileNotFoundError(f"--step={step}: {workdir} has checkpoints of steps {steps}")
    restored = trainer.checkpointer.restore_step(step, trainer.state)
    trainer.state, trainer.step = restored.state, step
  except BaseException:
    trainer.close()
    raise
  return trainer, step
