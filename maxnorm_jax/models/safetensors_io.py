"""safetensors files through the `safetensors` package: lazy reads (memory-mapped by the library,
one tensor at a time, bfloat16 included) and writes in the layout transformers reads.
"""

from __future__ import annotations

import os
from collections.abc import Iterable

import numpy as np
from safetensors import safe_open
from safetensors.numpy import save_file


class SafetensorsFile:
  """A lazily read safetensors file: `keys()`, `shape(name)`, `read(name)` (one numpy array)."""

  def __init__(self, path: str | os.PathLike):
    self.path = os.fspath(path)
    self._file = safe_open(self.path, framework="numpy")

  def keys(self) -> list[str]:
    return list(self._file.keys())

  def shape(self, name: str) -> tuple[int, ...]:
    return tuple(self._file.get_slice(name).get_shape())

  def read(self, name: str) -> np.ndarray:
    try:
      return self._file.get_tensor(name)
    except Exception as e:  # the library's message does not always name the tensor
      raise ValueError(f"cannot read tensor {name!r} from {self.path}: {e}") from e


def write_safetensors(path: str | os.PathLike, tensors: Iterable[tuple[str, np.ndarray]]) -> None:
  """Writes (name, array) pairs to one safetensors file (metadata format "pt", as transformers)."""
  arrays = {}
  for name, a in tensors:
    a = np.ascontiguousarray(a)
    if a.dtype.kind not in "fiub" and a.dtype.name != "bfloat16":
      raise ValueError(f"tensor {name!r} has unsupported dtype {a.dtype}")
    arrays[name] = a
  save_file(arrays, os.fspath(path), metadata={"format": "pt"})
