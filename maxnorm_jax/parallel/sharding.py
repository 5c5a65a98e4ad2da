"""Placing and constraining arrays on a mesh: rows over the batch axes, or replicated.

Every function takes the mesh and the logical-axis rules (`parallel.DEFAULT_RULES`, the table the
config's `rules` default to), so the model, the sampler and the trainer shard the same way.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec

from maxnorm_jax.parallel.rules import Rules, logical_to_sharding


def replicated(mesh: Mesh) -> NamedSharding:
  """The sharding of an array held whole by every device of `mesh`."""
  return NamedSharding(mesh, PartitionSpec())


def replicated_array(x: Any, mesh: Mesh) -> jax.Array:
  """A host array (the same on every process) as a global array replicated on `mesh`."""
  x = np.asarray(x)
  return jax.make_array_from_callback(x.shape, replicated(mesh), lambda idx: x[idx])


def batch_sharding(mesh: Mesh, rules: Rules, shape: Sequence[int]) -> NamedSharding:
  """[B, ...]: rows over the mesh axes of the logical "batch" axis, other dimensions replicated."""
  return logical_to_sharding(("batch",) + (None,) * (len(shape) - 1), rules, mesh, shape)


def rows_array(x: np.ndarray, mesh: Mesh, rules: Rules) -> jax.Array:
  """A host array [B, ...] (the same on every process) as a global array sharded by rows."""
  x = np.asarray(x)
  return jax.make_array_from_callback(x.shape, batch_sharding(mesh, rules, x.shape), lambda idx: x[idx])


def constrain(x: jax.Array, axes: Sequence[str | None], mesh: Mesh | None, rules: Rules) -> jax.Array:
  """Inside jit: `x` constrained to the sharding of its logical `axes` (unchanged without a mesh)."""
  if mesh is None:
    return x
  return jax.lax.with_sharding_constraint(x, logical_to_sharding(axes, rules, mesh, x.shape))


def constrain_rows(tree: Any, mesh: Mesh, rules: Rules) -> Any:
  """Inside jit: every leaf [B, ...] of `tree` constrained to `batch_sharding`."""
  return jax.tree.map(lambda x: jax.lax.with_sharding_constraint(x, batch_sharding(mesh, rules, x.shape)), tree)


@functools.partial(jax.jit, static_argnames=("mesh", "rules"))
def take_rows(x: jax.Array, rows: jax.Array, mesh: Mesh, rules: Rules) -> jax.Array:
  """x [B, ...], rows [R] int32 -> x[rows] [R, ...], sharded by rows (on device, no host copy)."""
  y = jnp.take(x, rows, axis=0)
  return jax.lax.with_sharding_constraint(y, batch_sharding(mesh, rules, y.shape))
