"""Device meshes built with `jax.make_mesh` and explicitly chosen axis types."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import jax
from jax.sharding import AxisType, Mesh

MESH_AXES = ("data", "fsdp", "tensor", "expert")


def check_axis_sizes(axis_sizes: Mapping[str, int], num_devices: int | None = None) -> dict[str, int]:
  """The mesh's axis sizes with -1 resolved; the one check of a mesh (config start-up and make_mesh).

  Axis names must be in MESH_AXES, sizes positive integers or -1 (at most one, taking the
  devices the others leave). With `num_devices`, the sizes must use exactly that many devices
  (the returned -1 entry is resolved); without it, -1 stays. Raises ValueError starting with
  the key: `mesh.fsdp: ...` or `mesh: ...`.
  """
  sizes = dict(axis_sizes)
  for axis, size in sizes.items():
    if axis not in MESH_AXES:
      raise ValueError(f"mesh.{axis}: unknown mesh axis; known: {list(MESH_AXES)}")
    if not isinstance(size, int) or isinstance(size, bool) or (size < 1 and size != -1):
      raise ValueError(f"mesh.{axis}: must be a positive integer or -1, got {size!r}")
  free = [a for a, s in sizes.items() if s == -1]
  if len(free) > 1:
    raise ValueError(f"mesh: at most one axis may be -1, got {sizes}")
  if num_devices is None:
    return sizes
  known = math.prod(s for s in sizes.values() if s != -1)
  if free:
    if num_devices % known:
      raise ValueError(f"mesh: {num_devices} devices do not divide into mesh {sizes}")
    sizes[free[0]] = num_devices // known
  if math.prod(sizes.values()) != num_devices:
    raise ValueError(f"mesh: {sizes} needs {math.prod(sizes.values())} devices, {num_devices} are available")
  return sizes


def make_mesh(
  axis_sizes: Mapping[str, int] | None = None,
  *,
  axis_type: AxisType = AxisType.Auto,
  devices: Sequence[jax.Device] | None = None,
) -> Mesh:
  """Builds a mesh over `devices` (default: all devices) with named axes.

  Args:
    axis_sizes: mesh axis name -> size, in mesh order, e.g. {"data": 4, "tensor": 2}.
      One size may be -1 and takes the remaining devices. Default: every device on "data".
    axis_type: the type given to every axis. `AxisType.Auto` (the default here, chosen on
      purpose) lets the compiler propagate shardings through the model; `AxisType.Explicit`
      makes shardings part of the types, where a contraction over a sharded axis needs an
      explicit `out_sharding`.
    devices: the devices to use.

  Returns:
    a `jax.sharding.Mesh` whose axes all have type `axis_type`.
  """
  devices = list(jax.devices() if devices is None else devices)
  sizes = check_axis_sizes({"data": len(devices)} if axis_sizes is None else axis_sizes, len(devices))
  return jax.make_mesh(tuple(sizes.values()), tuple(sizes), axis_types=(axis_type,) * len(sizes), devices=devices)


def auto_axes(mesh: Mesh) -> Mesh:
  """The same devices and axis names with every axis of type Auto.

  The model code leaves the propagation of activation shardings to the compiler, so parameters
  and caches are placed on this view of a mesh (an Explicit mesh from `jax.make_mesh`'s
  default would need an `out_sharding` on every contraction over a sharded axis).
  """
  if all(t == AxisType.Auto for t in mesh.axis_types):
    return mesh
  return Mesh(mesh.devices, mesh.axis_names, axis_types=(AxisType.Auto,) * len(mesh.axis_names))
