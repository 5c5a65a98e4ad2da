"""TPU slice names and the published figures of each chip generation.

`--topology` takes gcloud accelerator names (v4-N and v5p-N count TensorCores, two per chip, so
v5p-128 is 64 chips; v5e-N, v5litepod-N and v6e-N count chips) or the chip-grid form of
`jax.experimental.topologies.get_topology_desc` ("v5p:4x4x4", "v5e:4x4"). "cpu" plans for this
machine's (possibly simulated, XLA_FLAGS=--xla_force_host_platform_device_count=8) CPU devices.
"""

from __future__ import annotations

import dataclasses
import math
import os
import re

GIB = 1024**3


@dataclasses.dataclass(frozen=True)
class Chip:
  """One accelerator chip: HBM bytes, peak dense bf16 FLOP/s and HBM bandwidth (bytes/s)."""

  name: str
  hbm_bytes: int
  peak_flops: float
  hbm_bandwidth: float
  cores_per_chip: int  # TensorCores per chip, as gcloud's accelerator names count them
  grid_dims: int  # 3: a 3-D torus (v4, v5p); 2: a 2-D grid (v5e, v6e)


# Published per-chip figures (Cloud TPU system-architecture pages).
CHIPS = {
  "v4": Chip("v4", 32 * GIB, 275e12, 1228e9, 2, 3),
  "v5e": Chip("v5e", 16 * GIB, 197e12, 819e9, 1, 2),
  "v5p": Chip("v5p", 95 * GIB, 459e12, 2765e9, 2, 3),
  "v6e": Chip("v6e", 32 * GIB, 918e12, 1640e9, 1, 2),
}
_ALIASES = {"v5litepod": "v5e", "v5lite": "v5e", "v6": "v6e"}


@dataclasses.dataclass(frozen=True)
class Topology:
  """A slice: its chip, the grid ("4x4x4"), the number of chips and the name it was given by."""

  chip: Chip
  grid: tuple[int, ...]
  given: str

  @property
  def chips(self) -> int:
    return math.prod(self.grid)

  @property
  def desc_name(self) -> str:
    """The `get_topology_desc` name, e.g. "v5p:4x4x4"."""
    return f"{self.chip.name}:{'x'.join(map(str, self.grid))}"


def _grid_of(chips: int, dims: int) -> tuple[int, ...]:
  """The most balanced power-of-two grid of `chips` chips (2-D or 3-D, at least 2x2[x1])."""
  if chips < 1 or chips & (chips - 1):
    raise ValueError(f"a slice of {chips} chips is not a power of two")
  if dims == 2:
    if chips <= 2:
      return (1, chips)
    a = 2 ** (int(math.log2(chips)) // 2)
    return (a, chips // a)
  if chips < 4:
    return (1, 1, chips)
  e = int(math.log2(chips))
  base = [e // 3] * 3
  for i in range(e - 3 * (e // 3)):
    base[2 - i] += 1
  grid = tuple(2**b for b in base)
  if grid[0] == 1:  # 4 chips: 2x2x1 is the published single-host shape
    grid = (2, 2, 1)
  return grid


def parse_topology(name: str) -> Topology:
  """A gcloud accelerator type ("v5p-128") or a chip grid ("v5p:4x4x4") -> Topology."""
  text = name.strip().lower()
  grid_form = re.fullmatch(r"([a-z0-9]+):(\d+(?:x\d+)+)", text)
  gcloud_form = re.fullmatch(r"([a-z0-9]+)-(\d+)", text)
  if not grid_form and not gcloud_form:
    raise ValueError(f"--topology {name!r}: expected e.g. v5p-128, v5e-16, v5p:4x4x4 or v5e:4x4")
  gen = (grid_form or gcloud_form).group(1)
  gen = _ALIASES.get(gen, gen)
  if gen not in CHIPS:
    raise ValueError(f"--topology {name!r}: unknown TPU generation {gen!r}; known: {sorted(CHIPS)}")
  chip = CHIPS[gen]
  if grid_form:
    grid = tuple(int(x) for x in grid_form.group(2).split("x"))
    if len(grid) != chip.grid_dims or min(grid) < 1:
      raise ValueError(f"--topology {name!r}: {gen} slices are {chip.grid_dims}-D grids, e.g. {_example(chip)}")
    return Topology(chip, grid, name)
  count = int(gcloud_form.group(2))
  if count % chip.cores_per_chip:
    raise ValueError(f"--topology {name!r}: {gen}-N counts TensorCores ({chip.cores_per_chip} per chip)")
  try:
    grid = _grid_of(count // chip.cores_per_chip, chip.grid_dims)
  except ValueError as e:
    raise ValueError(f"--topology {name!r}: {e}") from None
  return Topology(chip, grid, name)


def _example(chip: Chip) -> str:
  return f"{chip.name}:2x2x2" if chip.grid_dims == 3 else f"{chip.name}:2x2"


def tpu_devices(topology: Topology):
  """The abstract devices of the slice (libtpu from the `tpu` extra; nothing is allocated)."""
  try:
    from jax.experimental import topologies
  except ImportError as e:  # pragma: no cover - jax always has it
    raise RuntimeError(f"jax.experimental.topologies is unavailable: {e}") from None
  # libtpu otherwise takes /tmp/libtpu_lockfile, and a second planner (or a test worker) fails.
  os.environ.setdefault("ALLOW_MULTIPLE_LIBTPU_LOAD", "1")
  kwargs = {}
  if topology.chips < 4:  # below one host's default 2x2 chips
    kwargs["chips_per_host_bounds"] = (topology.grid + (1, 1))[:3]
  try:
    desc = topologies.get_topology_desc(topology_name=topology.desc_name, platform="tpu", **kwargs)
  except Exception as e:  # libtpu missing or the grid unknown to it
    hint = "" if _has_libtpu() else "; install libtpu with `pip install -e '.[tpu]'`"
    raise RuntimeError(
      f"--topology {topology.given}: libtpu could not describe {topology.desc_name} ({e}){hint}"
    ) from None
  return list(desc.devices)


def _has_libtpu() -> bool:
  import importlib.util

  return importlib.util.find_spec("libtpu") is not None
