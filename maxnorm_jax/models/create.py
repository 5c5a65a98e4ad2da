"""Creating a decoder, optionally sharded on a mesh by logical-axis rules (abstract first)."""

from __future__ import annotations

from typing import Any

import jax
from flax import nnx
from jax.sharding import Mesh, NamedSharding

from maxnorm_jax.models.config import ModelConfig
from maxnorm_jax.models.decoder import Decoder
from maxnorm_jax.parallel.mesh import auto_axes
from maxnorm_jax.parallel.rules import DEFAULT_RULES, Rules, logical_to_sharding


def abstract_model(cfg: ModelConfig) -> Decoder:
  """The decoder with ShapeDtypeStructs in place of arrays (nothing allocated)."""
  return nnx.eval_shape(lambda: Decoder(cfg, rngs=nnx.Rngs(0)))


def param_shardings(model: Decoder, mesh: Mesh, rules: Rules = DEFAULT_RULES) -> dict[str, Any]:
  """A pure dict (as `nnx.State.to_pure_dict`) of each parameter's NamedSharding on `mesh`."""
  mesh = auto_axes(mesh)
  _, state = nnx.split(model)

  def sharding_of(var):
    return var.replace(logical_to_sharding(var.logical_axes, rules, mesh, var.get_value().shape))

  shardings = jax.tree.map(sharding_of, state, is_leaf=lambda x: isinstance(x, nnx.Variable))
  return nnx.to_pure_dict(shardings)


def create_model(
  cfg: ModelConfig,
  mesh: Mesh | None = None,
  rules: Rules = DEFAULT_RULES,
  seed: int = 0,
) -> Decoder:
  """A randomly initialised decoder.

  With a mesh, the model is first traced abstractly and then initialised by one jitted function
  whose outputs carry each parameter's sharding (from its logical axes and `rules`), so no
  parameter is ever whole on one device. Parameters go on the Auto-axes view of the mesh
  (`parallel.auto_axes`), also when `mesh` has Explicit axes.
  """
  if mesh is None:
    return Decoder(cfg, rngs=nnx.Rngs(seed))
  abstract = abstract_model(cfg)
  graphdef, abstract_state = nnx.split(abstract)
  shardings = param_shardings(abstract, mesh, rules)

  @jax.jit
  def init():
    _, state = nnx.split(Decoder(cfg, rngs=nnx.Rngs(seed)))
    pure = nnx.to_pure_dict(state)
    return jax.tree.map(jax.lax.with_sharding_constraint, pure, shardings)

  pure = init()
  nnx.replace_by_pure_dict(abstract_state, pure)
  return nnx.merge(graphdef, abstract_state)


def model_mesh(model: Decoder) -> Mesh | None:
  """The mesh the model's embedding lives on (None when it is not a NamedSharding)."""
  sharding = getattr(model.embed[...], "sharding", None)
  return sharding.mesh if isinstance(sharding, NamedSharding) else None
