"""Minimal safetensors reading (memory-mapped, lazy) and writing, bfloat16 included.

The format: an 8-byte little-endian header length N, N bytes of JSON
{name: {"dtype", "shape", "data_offsets": [begin, end]}, "__metadata__": {...}}, then the data.
"""

from __future__ import annotations

import json
import os
import struct
from collections.abc import Iterable

import ml_dtypes
import numpy as np

_DTYPES = {
    "F64": np.dtype(np.float64),
    "F32": np.dtype(np.float32),
    "F16": np.dtype(np.float16),
    "BF16": np.dtype(ml_dtypes.bfloat16),
    "I64": np.dtype(np.int64),
    "I32": np.dtype(np.int32),
    "I16": np.dtype(np.int16),
    "I8": np.dtype(np.int8),
    "U8": np.dtype(np.uint8),
    "BOOL": np.dtype(np.bool_),
}
_NAMES = {v: k for k, v in _DTYPES.items()}


class SafetensorsFile:
    """A lazily read safetensors file: `keys()`, `shape(name)`, `read(name)` (a memory-mapped view)."""

    def __init__(self, path: str | os.PathLike):
        self.path = os.fspath(path)
        with open(self.path, "rb") as f:
            (n,) = struct.unpack("<Q", f.read(8))
            header = json.loads(f.read(n))
        header.pop("__metadata__", None)
        self._header = header
        self._data_start = 8 + n
        self._mmap = None

    def keys(self) -> list[str]:
        return list(self._header)

    def shape(self, name: str) -> tuple[int, ...]:
        return tuple(self._header[name]["shape"])

    def read(self, name: str) -> np.ndarray:
        entry = self._header[name]
        if entry["dtype"] not in _DTYPES:
            raise ValueError(f"tensor {name!r} in {self.path} has unsupported dtype {entry['dtype']}")
        if self._mmap is None:
            self._mmap = np.memmap(self.path, dtype=np.uint8, mode="r")
        begin, end = entry["data_offsets"]
        raw = self._mmap[self._data_start + begin : self._data_start + end]
        return raw.view(_DTYPES[entry["dtype"]]).reshape(entry["shape"])


def write_safetensors(path: str | os.PathLike, tensors: Iterable[tuple[str, np.ndarray]]) -> None:
    """Writes (name, array) pairs to one safetensors file (metadata format "pt")."""
    arrays = [(name, np.ascontiguousarray(a)) for name, a in tensors]
    header: dict = {"__metadata__": {"format": "pt"}}
    offset = 0
    for name, a in arrays:
        if a.dtype not in _NAMES:
            raise ValueError(f"tensor {name!r} has unsupported dtype {a.dtype}")
        header[name] = {"dtype": _NAMES[a.dtype], "shape": list(a.shape), "data_offsets": [offset, offset + a.nbytes]}
        offset += a.nbytes
    blob = json.dumps(header, separators=(",", ":")).encode()
    blob += b" " * (-len(blob) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(blob)))
        f.write(blob)
        for _, a in arrays:
            f.write(a.tobytes())
