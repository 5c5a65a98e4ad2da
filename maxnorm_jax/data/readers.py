"""Raw row readers of JSONL, Parquet, ArrayRecord files and Hugging Face datasets saved to disk.

Each reader yields `(location, row)` pairs in file order; `location` names the file and the line
(JSONL, 1-based), row (Parquet, HF datasets; 1-based) or record (ArrayRecord; 1-based) so an error
can point at it. A row that cannot be parsed is yielded as a `BadRowError` in place of the row.
Readers use the libraries' own readers: pyarrow.parquet, grain's ArrayRecordDataSource,
datasets.load_from_disk.
"""

from __future__ import annotations

import glob
import json
import os
from typing import Any, Iterator, Sequence

from maxnorm_jax.data.records import BadRowError

Row = Any  # a dict, or a BadRowError for a row that could not be parsed

JSONL_SUFFIXES = (".jsonl", ".json", ".ndjson")
PARQUET_SUFFIXES = (".parquet", ".pq")
ARRAY_RECORD_SUFFIXES = (".array_record", ".arrayrecord")


def detect_format(path: str) -> str:
  """ "jsonl", "parquet", "array_record" or "hf_disk" (a directory from `Dataset.save_to_disk`).

  A ".json" file is read as JSON lines (one object per line), as Hugging Face dataset repos use it;
  sharded ArrayRecord names such as "x.array_record-00000-of-00004" are ArrayRecord.
  """
  if os.path.isdir(path):
    if any(os.path.exists(os.path.join(path, f)) for f in ("dataset_info.json", "dataset_dict.json", "state.json")):
      return "hf_disk"
    raise ValueError(f"{path}: a directory that is not a Hugging Face dataset saved to disk")
  base = path.lower()
  if base.endswith(JSONL_SUFFIXES):
    return "jsonl"
  if base.endswith(PARQUET_SUFFIXES):
    return "parquet"
  if base.endswith(ARRAY_RECORD_SUFFIXES) or any(s + "-" in base for s in ARRAY_RECORD_SUFFIXES):
    return "array_record"
  raise ValueError(
    f"{path}: unknown data file format; expected one of "
    f"{JSONL_SUFFIXES + PARQUET_SUFFIXES + ARRAY_RECORD_SUFFIXES} or a saved HF dataset"
  )


def expand_paths(paths: str | Sequence[str]) -> list[str]:
  """Paths with globs expanded (sorted, so every process sees the same order)."""
  if isinstance(paths, (str, os.PathLike)):
    paths = [paths]
  out: list[str] = []
  for p in map(str, paths):
    if any(c in p for c in "*?["):
      matched = sorted(glob.glob(p))
      if not matched:
        raise FileNotFoundError(f"{p}: no file matches this pattern")
      out.extend(matched)
    elif not os.path.exists(p):
      raise FileNotFoundError(f"{p}: no such file or directory")
    else:
      out.append(p)
  return out


def read_jsonl(path: str) -> Iterator[tuple[str, Row]]:
  """Rows of a JSON-lines file; blank lines are ignored, other lines must be JSON objects."""
  with open(path, "rb") as f:
    for lineno, raw in enumerate(f, start=1):
      location = f"{path}:{lineno}"
      try:
        text = raw.decode("utf-8")
      except UnicodeDecodeError as e:
        yield location, BadRowError(location, f"line is not UTF-8: {e}", "invalid_json")
        continue
      if not text.strip():
        continue
      try:
        yield location, json.loads(text)
      except json.JSONDecodeError as e:
        yield location, BadRowError(location, f"invalid JSON: {e.msg} (column {e.colno})", "invalid_json")


def read_parquet(path: str, batch_rows: int = 4096) -> Iterator[tuple[str, Row]]:
  """Rows of a Parquet file, read in record batches with pyarrow."""
  import pyarrow as pa
  import pyarrow.parquet as pq

  index = 0
  try:
    for batch in pq.ParquetFile(path).iter_batches(batch_size=batch_rows):
      for row in batch.to_pylist():
        index += 1
        yield f"{path}:row {index}", row
  except (pa.ArrowException, OSError) as e:  # truncated or not Parquet: name the file
    raise ValueError(f"{path}: cannot read this Parquet file after {index} rows: {e}") from None


def read_array_record(path: str) -> Iterator[tuple[str, Row]]:
  """Records of an ArrayRecord file, each a UTF-8 JSON object (read with grain's data source)."""
  import grain

  source = grain.sources.ArrayRecordDataSource([path])
  for i in range(len(source)):
    location = f"{path}:record {i + 1}"
    raw = source[i]
    try:
      yield location, json.loads(raw.decode("utf-8") if isinstance(raw, bytes) else raw)
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
      yield location, BadRowError(location, f"invalid JSON: {e}", "invalid_json")


def read_hf_disk(path: str, split: str | None = None) -> Iterator[tuple[str, Row]]:
  """Rows of a Hugging Face dataset saved with `save_to_disk` (a DatasetDict needs `split`)."""
  import datasets

  ds = datasets.load_from_disk(path)
  if isinstance(ds, datasets.DatasetDict):
    if split is None or split not in ds:
      raise KeyError(f"{path}: a DatasetDict with splits {sorted(ds)}; set data.split to one of them")
    ds = ds[split]
  for i, row in enumerate(ds):
    yield f"{path}:row {i + 1}", row


def read_rows(path: str, split: str | None = None) -> Iterator[tuple[str, Row]]:
  """Rows of one file or saved dataset, in file order, by detected format."""
  fmt = detect_format(path)
  if fmt == "jsonl":
    return read_jsonl(path)
  if fmt == "parquet":
    return read_parquet(path)
  if fmt == "array_record":
    return read_array_record(path)
  return read_hf_disk(path, split)
