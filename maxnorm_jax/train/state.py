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
from jax.sharding import Mesh, NamedSharding

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


def init_opt_state(optimizer: optax.GradientTransformation, params, mesh: Mesh):
  """The optimiser state of `params`: Adam's moments follow the parameters' shardings; counters
  (and anything the compiler left on one device) are placed replicated, so every step sees the
  same committed input layout and compiles once."""
  rep = replicated(mesh)
  opt_state = jax.jit(optimizer.init)(params)
  return jax.tree.map(
    lambda x: x if isinstance(x.sharding, NamedSharding) and x.committed else jax.device_put(x, rep), opt_state
  )


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
