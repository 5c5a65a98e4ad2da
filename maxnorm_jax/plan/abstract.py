"""Abstract inputs of one RL step: ShapeDtypeStructs that carry the run's shardings, so the real
jitted functions lower and compile for a device set without any array being allocated."""

from __future__ import annotations

import math
from typing import Any

import jax
import jax.numpy as jnp
from flax import nnx
from jax.sharding import Mesh, NamedSharding, PartitionSpec

from maxnorm_jax.core import advantages
from maxnorm_jax.models.config import ModelConfig
from maxnorm_jax.models.decoder import Decoder
from maxnorm_jax.parallel.rules import Rules
from maxnorm_jax.parallel.sharding import batch_sharding
from maxnorm_jax.train import step as step_lib
from maxnorm_jax.train.state import TrainState, float32_init, opt_state_shardings, weight_shardings


def with_sharding(shapes: Any, shardings: Any) -> Any:
  """ShapeDtypeStructs of `shapes` placed by `shardings` (same tree)."""
  return jax.tree.map(lambda s, sh: jax.ShapeDtypeStruct(s.shape, s.dtype, sharding=sh), shapes, shardings)


def replicated_like(tree: Any, mesh: Mesh) -> Any:
  rep = NamedSharding(mesh, PartitionSpec())
  return jax.tree.map(lambda s: jax.ShapeDtypeStruct(s.shape, s.dtype, sharding=rep), tree)


def shard_bytes(x: jax.ShapeDtypeStruct) -> int:
  """Bytes of the largest per-device shard of `x`."""
  shape = x.sharding.shard_shape(x.shape) if x.sharding is not None else x.shape
  return math.prod(shape) * itemsize(x.dtype)


def itemsize(dtype) -> int:
  """Bytes per element; a PRNG key (an extended dtype) is its raw uint32 data."""
  if jax.dtypes.issubdtype(dtype, jax.dtypes.prng_key):
    return math.prod(jax.eval_shape(lambda: jax.random.key_data(jax.random.key(0))).shape) * 4
  return jnp.dtype(dtype).itemsize


def tree_shard_bytes(tree: Any) -> int:
  """Per-device bytes of a tree of ShapeDtypeStructs (every leaf's largest shard)."""
  return sum(shard_bytes(x) for x in jax.tree.leaves(tree))


def abstract_params(cfg: ModelConfig, mesh: Mesh, rules: Rules) -> dict:
  """The weights pytree (`Decoder.weights()` layout) as sharded ShapeDtypeStructs."""
  shapes = jax.eval_shape(lambda: Decoder(cfg, rngs=nnx.Rngs(0)).weights())
  return with_sharding(shapes, weight_shardings(cfg, mesh, rules))


def abstract_opt_state(optimizer, params: dict, mesh: Mesh):
  """The optimiser state (float32 moments) as `state.init_opt_state` places it."""
  shapes = jax.eval_shape(float32_init(optimizer), params)
  shardings = opt_state_shardings(optimizer, params, jax.tree.map(lambda x: x.sharding, params), mesh)
  return with_sharding(shapes, shardings)


def abstract_train_state(params: dict, opt_state: Any, estimator: str, mesh: Mesh) -> TrainState:
  est = advantages.initial_state(estimator)
  est_shapes = jax.eval_shape(lambda: est if est is not None else {})
  return TrainState(
    step=replicated_like(jax.ShapeDtypeStruct((), jnp.int32), mesh),
    params=params,
    opt_state=opt_state,
    rng=replicated_like(jax.ShapeDtypeStruct((2,), jnp.uint32), mesh),
    estimator_state=replicated_like(est_shapes, mesh),
  )


def rows(shape: tuple[int, ...], dtype, mesh: Mesh, rules: Rules) -> jax.ShapeDtypeStruct:
  """A row-sharded batch array (the trainer's `rollout.rows_array` layout)."""
  return jax.ShapeDtypeStruct(shape, dtype, sharding=batch_sharding(mesh, rules, shape))


def abstract_rollout(b: int, prompt_len: int, new_tokens: int, mesh: Mesh, rules: Rules) -> step_lib.Rollout:
  """The update's batch [B, L] / [B, N] / [B]."""
  ln, n = (b, prompt_len), (b, new_tokens)
  return step_lib.Rollout(
    prompt_ids=rows(ln, jnp.int32, mesh, rules),
    prompt_mask=rows(ln, jnp.bool_, mesh, rules),
    tokens=rows(n, jnp.int32, mesh, rules),
    mask=rows(n, jnp.bool_, mesh, rules),
    loss_mask=rows(n, jnp.bool_, mesh, rules),
    old_logp=rows(n, jnp.float32, mesh, rules),
    ref_logp=rows(n, jnp.float32, mesh, rules),
    advantages=rows((b,), jnp.float32, mesh, rules),
    kl_weight=rows((b,), jnp.float32, mesh, rules),
    takes_part=rows((b,), jnp.bool_, mesh, rules),
  )


def abstract_key(mesh: Mesh) -> jax.ShapeDtypeStruct:
  return replicated_like(jax.eval_shape(lambda: jax.random.key(0)), mesh)
