"""maxnorm_jax.parallel: device meshes, logical-axis rules and placing arrays on a mesh."""

from maxnorm_jax.parallel.mesh import MESH_AXES, auto_axes, check_axis_sizes, make_mesh
from maxnorm_jax.parallel.rules import DEFAULT_RULES, Rules, logical_to_sharding, logical_to_spec
from maxnorm_jax.parallel.sharding import (
  batch_sharding,
  constrain,
  constrain_rows,
  replicated,
  replicated_array,
  rows_array,
  take_rows,
)

__all__ = [
  "DEFAULT_RULES",
  "MESH_AXES",
  "Rules",
  "auto_axes",
  "batch_sharding",
  "check_axis_sizes",
  "constrain",
  "constrain_rows",
  "logical_to_sharding",
  "logical_to_spec",
  "make_mesh",
  "replicated",
  "replicated_array",
  "rows_array",
  "take_rows",
]
