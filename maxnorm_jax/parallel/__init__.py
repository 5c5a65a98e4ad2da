"""maxnorm_jax.parallel: device meshes and logical-axis rules."""

from maxnorm_jax.parallel.mesh import MESH_AXES, auto_axes, make_mesh
from maxnorm_jax.parallel.rules import DEFAULT_RULES, Rules, logical_to_sharding, logical_to_spec

__all__ = [
  "DEFAULT_RULES",
  "MESH_AXES",
  "Rules",
  "auto_axes",
  "logical_to_sharding",
  "logical_to_spec",
  "make_mesh",
]
