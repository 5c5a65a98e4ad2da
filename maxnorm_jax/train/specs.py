"""What a config fixes before any weight exists: the decoder's shape, the optimiser, the update's
static spec and its hyper-parameters. The trainer and the planner (`maxnorm_jax.plan`) both build
them here, so a plan compiles exactly the functions a run calls."""

from __future__ import annotations

import functools
import json
import os
from typing import Any

from jax.sharding import Mesh

from maxnorm_jax.models.config import ModelConfig
from maxnorm_jax.parallel.rules import Rules
from maxnorm_jax.train import step as step_lib
from maxnorm_jax.train.optimizer import make_optimizer


def plain(c) -> dict:
  return c.to_dict() if hasattr(c, "to_dict") else dict(c)


@functools.lru_cache(maxsize=32)
def _optimizer(optim_items: tuple, total_updates: int):
  return make_optimizer(dict(optim_items), total_updates)


def optimizer_of(c: Any):
  """The run's optax optimiser (cached per config, so update specs compare equal)."""
  updates_per_step = c.train.ppo_epochs * c.train.minibatches
  return _optimizer(tuple(sorted(plain(c.optim).items())), c.train.steps * updates_per_step)


def tiny_model_config(c: Any, vocab_size: int) -> ModelConfig:
  """The built-in decoder of `config.model` (kind "tiny")."""
  m = c.model
  return ModelConfig.tiny(
    vocab_size,
    hidden_size=m.hidden_size,
    intermediate_size=m.intermediate_size,
    num_layers=m.num_layers,
    num_heads=m.num_heads,
    num_kv_heads=m.num_kv_heads,
    head_dim=m.head_dim,
    param_dtype=m.param_dtype,
    dtype=m.dtype,
    remat=m.remat,
    attention_chunk=m.attention_chunk,
  )


def hf_model_config(c: Any, checkpoint_dir: str | None) -> tuple[ModelConfig, str]:
  """The decoder of a Hugging Face preset without loading weights: `checkpoint_dir`/config.json
  when it exists, else the preset's published `config.model.arch`. Returns (config, source)."""
  overrides = dict(
    param_dtype=c.model.param_dtype, dtype=c.model.dtype, remat=c.model.remat, attention_chunk=c.model.attention_chunk
  )
  if checkpoint_dir and os.path.isfile(os.path.join(checkpoint_dir, "config.json")):
    path = os.path.join(checkpoint_dir, "config.json")
    with open(path) as f:
      return ModelConfig.from_hf_dict(json.load(f), **overrides), path
  arch = plain(c.model.get("arch", {}))
  if not arch:
    raise ValueError(
      f"config.model.arch: preset {c.model.preset!r} has no published architecture and "
      f"{c.model.path} has no config.json; add the checkpoint or the preset's arch"
    )
  try:
    return ModelConfig.from_hf_dict(arch, **overrides), "config.model.arch"
  except (KeyError, ValueError, TypeError) as e:
    raise ValueError(f"config.model.arch: {e}") from None


def update_spec_of(c: Any, model_cfg: ModelConfig, mesh: Mesh, rules: Rules, optimizer) -> step_lib.UpdateSpec:
  """The PPO update's static spec from the config."""
  use_reference = c.loss.beta > 0
  return step_lib.UpdateSpec(
    model=model_cfg,
    mesh=mesh,
    rules=rules,
    optimizer=optimizer,
    temperature=float(c.rollout.temperature),
    surrogate=c.loss.surrogate,
    aggregation=c.loss.aggregation,
    kl_kind=c.loss.kl_kind,
    kl_in_loss=use_reference and c.loss.kl_in == "loss",
    dual_clip=float(c.loss.dual_clip) if c.loss.dual_clip else None,
    ppo_epochs=c.train.ppo_epochs,
    minibatches=c.train.minibatches,
    grad_accum=c.train.grad_accum,
    top_k=int(c.rollout.top_k),
    top_p=float(c.rollout.top_p),
    max_len=int(c.rollout.max_new_tokens),
  )


def hparam_values(c: Any, model_cfg: ModelConfig) -> dict[str, float]:
  """The update's traced hyper-parameters (scalars, placed replicated by the caller)."""
  return dict(
    clip_low=c.loss.clip_low,
    clip_high=c.loss.clip_high,
    beta=c.loss.beta,
    entropy_coef=c.loss.entropy_coef,
    aux_coef=model_cfg.router_aux_loss_coef,
  )


def rules_of(c: Any) -> Rules:
  return tuple((k, tuple(v) if isinstance(v, list) else v) for k, v in c.rules)
