"""maxnorm_jax.train: the RL trainer.

  from maxnorm_jax.train import train
  rows = train(config, workdir)     # config: configs/default.py's get_config(...)

state           TrainState (params, optimiser state, step, RNG, estimator state)
step            the jitted device side: log-prob passes, advantage card, PPO update, metrics
rollout         host side: global arrays, local rows to verify, overlong shaping, group filters
loop            Trainer and train(config, workdir)
sft             the SFT warm start on reference answers
checkpointing   orbax CheckpointManager and the SIGTERM flag
metrics         metrics.jsonl, TensorBoard, progress bar, advantage cards
run_data        reading a workdir back (notebooks)
config_check    start-up validation naming the bad key
"""

from maxnorm_jax.train.config_check import ConfigError, validate
from maxnorm_jax.train.loop import Trainer, train
from maxnorm_jax.train.state import TrainState

__all__ = ["ConfigError", "TrainState", "Trainer", "train", "validate"]
