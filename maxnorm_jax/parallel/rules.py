"""Logical-axis rules: (logical_name, mesh_axis_or_None) pairs mapped to shardings."""

from __future__ import annotations

from collections.abc import Sequence

from jax.sharding import Mesh, NamedSharding, PartitionSpec

Rules = tuple[tuple[str, str | tuple[str, ...] | None], ...]

# The one rules table (the trainer config's `rules` default to it): the batch over "data" and
# "fsdp" (FSDP shards the batch like data parallelism), parameters sharded FSDP-style on "fsdp",
# Megatron-style on "tensor", experts on "expert". Axes that a mesh lacks are simply not used.
DEFAULT_RULES: Rules = (
  ("batch", ("data", "fsdp")),
  ("vocab", "tensor"),
  ("embed", "fsdp"),
  ("heads", "tensor"),
  ("kv_heads", "tensor"),
  ("head_dim", None),
  ("mlp", "tensor"),
  ("expert", "expert"),
  ("layers", None),
  ("seq", None),
)


def logical_to_spec(
  logical_axes: Sequence[str | None],
  rules: Rules,
  mesh: Mesh,
  shape: Sequence[int] | None = None,
) -> PartitionSpec:
  """Maps logical axis names to a PartitionSpec on `mesh`.

  A logical name takes the mesh axis of its first rule. A mesh axis is dropped when the mesh
  lacks it, when it has size 1, when an earlier dimension already uses it, or (if `shape` is
  given) when its size does not divide the dimension. Names without a rule are replicated.
  """
  table: dict[str, str | tuple[str, ...] | None] = {}
  for name, axis in rules:
    table.setdefault(name, axis)
  used: set[str] = set()
  spec = []
  for dim, name in enumerate(logical_axes):
    target = table.get(name) if name is not None else None
    axes = () if target is None else (target,) if isinstance(target, str) else tuple(target)
    kept = []
    size = 1
    for ax in axes:
      if ax not in mesh.shape or mesh.shape[ax] == 1 or ax in used:
        continue
      if shape is not None and shape[dim] % (size * mesh.shape[ax]):
        continue
      kept.append(ax)
      size *= mesh.shape[ax]
    used.update(kept)
    spec.append(None if not kept else kept[0] if len(kept) == 1 else tuple(kept))
  while spec and spec[-1] is None:
    spec.pop()
  return PartitionSpec(*spec)


def logical_to_sharding(
  logical_axes: Sequence[str | None],
  rules: Rules,
  mesh: Mesh,
  shape: Sequence[int] | None = None,
) -> NamedSharding:
  """The NamedSharding of `logical_to_spec` on `mesh`."""
  return NamedSharding(mesh, logical_to_spec(logical_axes, rules, mesh, shape))
