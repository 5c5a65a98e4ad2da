"""The train state: parameters, optimiser state, step, RNG and the estimator's carried state.

Parameters are the decoder's weights pytree (`Decoder.weights()` layout: a dict with "embed",
"layers" (a list of per-layer dicts), "final_norm" and, untied, "lm_head"), so the pure model
functions, the sampler, optax and orbax all take the same tree. The data iterator's state is not
a JAX value; the checkpointer saves it beside this state.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import optax
from flax import struct
from jax.sharding import Mesh

from maxnorm_jax.models.config import ModelConfig
from maxnorm_jax.models.create import abstract_model, param_shardings
from maxnorm_jax.parallel.sharding import replicated


@struct.dataclass
class TrainState:
  """step [] int32 (RL steps done); params; opt_state; rng [2] uint32 (raw key data, so the state
  is a plain array pytree for orbax); estimator_state: AVSPO's threshold or {}."""

  step: jax.Array
  params: Any
  opt_state: Any
  rng: jax.Array
  estimator_state: Any


def weights_from_pure(pure: dict) -> dict:
  """An `nnx.to_pure_dict` state of a Decoder (layers keyed 0..n-1) -> the weights layout."""
  out = dict(pure)
  layers = pure["layers"]
  out["layers"] = [layers[i] for i in range(len(layers))]
  return out


def weight_shardings(cfg: ModelConfig, mesh: Mesh, rules) -> dict:
  """Each parameter's NamedSharding, in the weights layout."""
  return weights_from_pure(param_shardings(abstract_model(cfg), mesh, rules))


def float32_init(optimizer: optax.GradientTransformation):
  """`optimizer.init` on the parameters cast to float32: Adam's moments stay float32 when the
  parameters are bfloat16 (the float32 gradients of a bfloat16 model would otherwise turn
  bfloat16 moments into float32 ones inside the update's scan, which JAX refuses)."""

  def init(params):
    return optimizer.init(
      jax.tree.map(lambda p: p.astype(jnp.float32) if jnp.issubdtype(p.dtype, jnp.floating) else p, params)
    )

  return init


def opt_state_shardings(optimizer: optax.GradientTransformation, params, param_shardings, mesh: Mesh):
  """Each optimiser-state leaf's sharding: a moment takes its parameter's sharding, anything else
  (step counters) is replicated. (Left to the compiler, zero-initialised moments, which do not
  depend on the parameters, were laid out replicated on a TPU slice.)"""
  rep = replicated(mesh)
  shapes = jax.eval_shape(float32_init(optimizer), params)
  return optax.tree_utils.tree_map_params(
    float32_init(optimizer), lambda _, sharding: sharding, shapes, param_shardings, transform_non_params=lambda _: rep
  )


def init_opt_state(optimizer: optax.GradientTransformation, params, mesh: Mesh):
  """The optimiser state of `params` (float32 moments): Adam's moments take the parameters'
  shardings and counters are replicated, so every step sees the same committed input layout and
  compiles once."""
  shardings = opt_state_shardings(optimizer, params, jax.tree.map(lambda x: x.sharding, params), mesh)
  return jax.jit(float32_init(optimizer), out_shardings=shardings)(params)


def create_train_state(
  params, optimizer: optax.GradientTransformation, seed: int, estimator_state: Any, mesh: Mesh
) -> TrainState:
  """A fresh state around `params` (already placed on the mesh); the optimiser state takes the
  parameters' shardings (its scalar counters are replicated)."""
  rep = replicated(mesh)
  opt_state = init_opt_state(optimizer, params, mesh)
  rng = jax.device_put(jax.random.key_data(jax.random.key(seed)), rep)
  est = jax.device_put(estimator_state if estimator_state is not None else {}, rep)
  return TrainState(
    step=jax.device_put(jnp.zeros((), jnp.int32), rep), params=params, opt_state=opt_state, rng=rng, estimator_state=est
  )


def state_shardings(state: TrainState) -> TrainState:
  """The sharding of every leaf (the out_shardings of the update step)."""
  return jax.tree.map(lambda x: x.sharding, state)
