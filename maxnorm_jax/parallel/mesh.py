"""Device meshes built with `jax.make_mesh` and explicitly chosen axis types."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import jax
from jax.sharding import AxisType, Mesh

MESH_AXES = ("data", "fsdp", "tensor", "expert")


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
  if axis_sizes is None:
    axis_sizes = {"data": len(devices)}
  names = tuple(axis_sizes)
  sizes = [int(s) for s in axis_sizes.values()]
  if sizes.count(-1) > 1:
    raise ValueError(f"at most one mesh axis may have size -1, got {dict(axis_sizes)}")
  known = 1
  for s in sizes:
    if s != -1:
      if s <= 0:
        raise ValueError(f"mesh axis sizes must be positive or -1, got {dict(axis_sizes)}")
      known *= s
  if -1 in sizes:
    if len(devices) % known:
      raise ValueError(f"{len(devices)} devices do not divide into mesh {dict(axis_sizes)}")
    sizes[sizes.index(-1)] = len(devices) // known
  total = 1
  for s in sizes:
    total *= s
  if total != len(devices):
    raise ValueError(f"mesh {dict(zip(names, sizes))} needs {total} devices, {len(devices)} are available")
  return jax.make_mesh(tuple(sizes), names, axis_types=(axis_type,) * len(names), devices=devices)


def auto_axes(mesh: Mesh) -> Mesh:
  """The same devices and axis names with every axis of type Auto.

  The model code leaves the propagation of activation shardings to the compiler, so parameters
  and caches are placed on this view of a mesh (an Explicit mesh from `jax.make_mesh`'s
  default would need an `out_sharding` on every contraction over a sharded axis).
  """
  if all(t == AxisType.Auto for t in mesh.axis_types):
    return mesh
  return Mesh(mesh.devices, mesh.axis_names, axis_types=(AxisType.Auto,) * len(mesh.axis_names))
