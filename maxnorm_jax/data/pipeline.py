"""The grain pipeline of prompts: source -> records -> format + tokenize -> shuffle -> shard -> epochs
-> batches of P prompts, with a state that can be saved and restored.

    it = build_pipeline("builtin:arith", tokenizer=CharTokenizer(), batch_size=8, seed=0)
    batch = next(it)            # {"prompt_ids" [P, L] int32 left-padded, "prompt_mask" [P, L] bool,
                                #  "prompt_lengths" [P] int32, "records": [P dicts], "index", "epoch"}
    state = it.get_state()      # JSON-able; `build_pipeline(same args).set_state(state)` resumes
                                # with exactly the batches this iterator would have given next.

Sources: file paths or globs (JSONL, Parquet, ArrayRecord; a directory saved by
`datasets.Dataset.save_to_disk`), or a built-in task "builtin:<name>" (see `tasks`). Every row is
read, validated, formatted and tokenized once when the pipeline is built, so a bad row fails the
run before it starts: `BadRowError` names the file and line, or, with `skip_bad_rows=True`, the row
is dropped and counted in `metrics()` ("data/rows_skipped", "data/skipped/<reason>"). The kept
records stay in host memory (the prompt sets of RLVR runs are 1e3-1e6 rows).

Order: grain's `MapDataset.shuffle(seed)` (reseeded every epoch by `repeat`), truncation to a
multiple of the shard count (so every process gets the same number of prompts per epoch, and the
processes together see each kept row at most once per epoch; the fewer than shard_count rows cut
change from epoch to epoch), the slice `[shard_index::shard_count]`,
`repeat(num_epochs)`, `batch(P)`. Batches may span an epoch boundary; `epoch` is the epoch of a
batch's first prompt. The iterator's state is grain's own (`next_index`) plus a fingerprint of the
pipeline's arguments and data, so a state cannot be restored into a different pipeline. Every
process reads and validates all rows, so all agree on the kept rows and their shards.
"""

from __future__ import annotations

import collections
import hashlib
import json
from typing import Any, Callable, Iterator, Mapping, Sequence

import grain
import numpy as np

from maxnorm_jax.data import readers, tasks
from maxnorm_jax.data.formatting import ChatFormat, PlainFormat, Tokenizer
from maxnorm_jax.data.heldout import heldout_prompts
from maxnorm_jax.data.presets import field_map
from maxnorm_jax.data.records import BadRowError, FieldMap, validate_row

BUILTIN_PREFIX = "builtin:"


def _builtin_name(source: str) -> str | None:
  if source.startswith(BUILTIN_PREFIX):
    name = source[len(BUILTIN_PREFIX) :]
    if name not in tasks.names():
      raise KeyError(f"data.source {source!r}: unknown built-in task; known: {tasks.names()}")
    return name
  return None


def iter_rows(
  sources: str | Sequence[str], *, split: str = "train", seed: int = 0, builtin_n: int | None = None
) -> Iterator[tuple[str, Any]]:
  """(location, raw row) of every source in order; built-in tasks give records already."""
  if isinstance(sources, str):
    sources = [sources]
  for source in sources:
    name = _builtin_name(str(source))
    if name is not None:
      for i, record in enumerate(tasks.make(name, split, seed, builtin_n)):
        yield f"{source}:{split}:{i + 1}", record
    else:
      for path in readers.expand_paths(str(source)):
        yield from readers.read_rows(path, split)


class LoadReport:
  """Counts of a load: rows read, kept, skipped by reason, and the first skipped rows' messages."""

  max_examples = 20

  def __init__(self):
    self.rows_read = 0
    self.rows_kept = 0
    self.skipped: collections.Counter[str] = collections.Counter()
    self.examples: list[str] = []

  def skip(self, error: BadRowError) -> None:
    self.skipped[error.kind] += 1
    if len(self.examples) < self.max_examples:
      self.examples.append(str(error))

  def metrics(self) -> dict[str, int]:
    """Flat metric dict: data/rows_read, data/rows_kept, data/rows_skipped, data/skipped/<reason>."""
    out = {
      "data/rows_read": self.rows_read,
      "data/rows_kept": self.rows_kept,
      "data/rows_skipped": sum(self.skipped.values()),
    }
    out.update({f"data/skipped/{k}": v for k, v in sorted(self.skipped.items())})
    return out


def load_records(
  sources: str | Sequence[str],
  tokenizer: Tokenizer,
  *,
  fields: FieldMap | Mapping[str, Any] | str | None = None,
  prompt_format: PlainFormat | ChatFormat | None = None,
  max_prompt_len: int = 512,
  skip_bad_rows: bool = False,
  split: str = "train",
  seed: int = 0,
  builtin_n: int | None = None,
  check_record: Callable[[dict[str, Any]], str | None] | None = None,
) -> tuple[list[dict[str, Any]], LoadReport]:
  """Every valid record of the sources, formatted and tokenized, and the load's report.

  Each record gains `location` ("file:line"), `prompt_text` (the formatted prompt) and
  `prompt_ids` (int32 array). A bad row raises `BadRowError` unless `skip_bad_rows`; so does a
  record for which `check_record` (e.g. "has its task a verifier, does its answer parse") returns
  a reason (kind "unscorable").
  """
  fields = field_map(fields)
  prompt_format = prompt_format or PlainFormat()
  report = LoadReport()
  records: list[dict[str, Any]] = []
  for location, row in iter_rows(sources, split=split, seed=seed, builtin_n=builtin_n):
    report.rows_read += 1
    try:
      if isinstance(row, BadRowError):
        raise row
      record = validate_row(row, fields, location)
      why = check_record(record) if check_record is not None else None
      if why is not None:
        raise BadRowError(location, f"cannot be scored: {why}", "unscorable")
      text, ids = prompt_format.encode(record, tokenizer)
      if len(ids) > max_prompt_len:
        raise BadRowError(
          location, f"prompt has {len(ids)} tokens, over max_prompt_len={max_prompt_len}", "prompt_too_long"
        )
    except BadRowError as e:
      if not skip_bad_rows:
        raise
      report.skip(e)
      continue
    record.update(location=location, prompt_text=text, prompt_ids=np.asarray(ids, np.int32))
    records.append(record)
  report.rows_kept = len(records)
  return records, report


def collate(records: Sequence[Mapping[str, Any]], max_prompt_len: int, pad_id: int) -> dict[str, Any]:
  """A batch of records: left-padded `prompt_ids` [P, L], `prompt_mask`, `prompt_lengths`, `records`."""
  p = len(records)
  ids = np.full((p, max_prompt_len), pad_id, np.int32)
  mask = np.zeros((p, max_prompt_len), bool)
  lengths = np.zeros((p,), np.int32)
  out_records = []
  for i, r in enumerate(records):
    n = len(r["prompt_ids"])
    if n:
      ids[i, max_prompt_len - n :] = r["prompt_ids"]
      mask[i, max_prompt_len - n :] = True
    lengths[i] = n
    out_records.append({k: v for k, v in r.items() if k != "prompt_ids"})
  return {"prompt_ids": ids, "prompt_mask": mask, "prompt_lengths": lengths, "records": out_records}


def _fingerprint(records: Sequence[Mapping[str, Any]], **args: Any) -> str:
  h = hashlib.sha256(json.dumps(args, sort_keys=True, default=str).encode())
  for r in records:
    h.update(r["location"].encode())
    h.update(np.asarray(r["prompt_ids"], np.int32).tobytes())
  return h.hexdigest()[:16]


class PromptIterator:
  """Iterator of prompt batches over a grain dataset; `get_state`/`set_state` resume it exactly."""

  def __init__(
    self,
    dataset: grain.IterDataset,
    report: LoadReport,
    fingerprint: str,
    *,
    batch_size: int,
    shard_rows: int,
    num_batches: int | None,
    records: Sequence[Mapping[str, Any]] = (),
    heldout: Sequence[Mapping[str, Any]] = (),
  ):
    self._iter = iter(dataset)
    self.records = list(records)  # the kept records this pipeline draws from (held-out ones removed)
    self.heldout = list(heldout)  # the held-out records (see `holdout_fraction`), smallest hash first
    self.report = report
    self.fingerprint = fingerprint
    self.batch_size = batch_size
    self.shard_rows = shard_rows  # prompts this process sees per epoch
    self.num_batches = num_batches  # None: endless

  def __iter__(self) -> "PromptIterator":
    return self

  def __next__(self) -> dict[str, Any]:
    return next(self._iter)

  def get_state(self) -> dict[str, Any]:
    """A JSON-able state: grain's iterator state and the pipeline's fingerprint."""
    return {"grain": self._iter.get_state(), "fingerprint": self.fingerprint}

  def set_state(self, state: Mapping[str, Any]) -> None:
    """Restores a state from `get_state` of a pipeline built with the same arguments and data."""
    if state.get("fingerprint") != self.fingerprint:
      raise ValueError(
        f"data iterator state has fingerprint {state.get('fingerprint')!r}, this pipeline "
        f"{self.fingerprint!r}: the data, the format or the pipeline's arguments changed"
      )
    self._iter.set_state(state["grain"])

  def metrics(self) -> dict[str, int]:
    """Load metrics (rows read, kept, skipped by reason)."""
    return self.report.metrics()


def build_pipeline(
  source: str | Sequence[str],
  *,
  tokenizer: Tokenizer,
  batch_size: int,
  fields: FieldMap | Mapping[str, Any] | str | None = None,
  prompt_format: PlainFormat | ChatFormat | None = None,
  seed: int = 0,
  shard_index: int | None = None,
  shard_count: int | None = None,
  num_epochs: int | None = None,
  skip_bad_rows: bool = False,
  max_prompt_len: int = 512,
  split: str = "train",
  builtin_n: int | None = None,
  shuffle: bool = True,
  drop_remainder: bool = True,
  holdout_fraction: float = 0.0,
  holdout_cap: int | None = None,
  check_record: Callable[[dict[str, Any]], str | None] | None = None,
) -> PromptIterator:
  """The prompt batch iterator of `source` (see the module docstring).

  Args:
    source: path(s)/glob(s) of JSONL/Parquet/ArrayRecord files or saved HF datasets, or "builtin:<task>".
    tokenizer: a `CharTokenizer` or `HFTokenizer` (its `pad_id` pads the batch).
    batch_size: P, prompts per batch.
    fields: the field mapping: a `FieldMap`, its config dict, or a preset name (`presets`).
    prompt_format: `PlainFormat()` (default) or `ChatFormat(...)`.
    seed: shuffle seed (also the built-in tasks' generation seed).
    shard_index, shard_count: this process's shard; default `jax.process_index()/process_count()`.
    num_epochs: passes over the data; None repeats forever.
    skip_bad_rows: drop bad rows (counted in `metrics()`) instead of raising `BadRowError`.
    max_prompt_len: longest prompt in tokens; also the padded width L of `prompt_ids`.
    split: the built-in task split, or the split of a saved `DatasetDict`.
    builtin_n: how many built-in problems to generate (None: the whole split).
    shuffle, drop_remainder: False/False for evaluation passes in file order.
    holdout_fraction, holdout_cap: hold out the prompts `heldout.heldout_prompts` picks (hash of
      the prompt text below the fraction, at most `holdout_cap`): the iterator never yields them,
      they are its `heldout` records (one per prompt text). 0.0: nothing held out.
    check_record: a record -> None, or why its row cannot be scored (a bad row, see `load_records`).
  """
  if batch_size < 1:
    raise ValueError(f"data.batch_size must be >= 1, got {batch_size}")
  if shard_index is None or shard_count is None:
    import jax

    shard_index = jax.process_index() if shard_index is None else shard_index
    shard_count = jax.process_count() if shard_count is None else shard_count
  if not 0 <= shard_index < shard_count:
    raise ValueError(f"shard_index {shard_index} must lie in [0, shard_count={shard_count})")
  if num_epochs is not None and num_epochs < 1:
    raise ValueError(f"data.num_epochs must be >= 1 or None, got {num_epochs}")
  fields = field_map(fields)
  pad_id = tokenizer.pad_id if tokenizer.pad_id is not None else 0
  records, report = load_records(
    source,
    tokenizer,
    fields=fields,
    prompt_format=prompt_format,
    max_prompt_len=max_prompt_len,
    skip_bad_rows=skip_bad_rows,
    split=split,
    seed=seed,
    builtin_n=builtin_n,
    check_record=check_record,
  )
  heldout: list[dict[str, Any]] = []
  if holdout_fraction:
    try:
      held = heldout_prompts((r["prompt"] for r in records), holdout_fraction, holdout_cap)
    except ValueError as e:
      raise ValueError(f"data.source {source!r}: {e}") from None
    first = {}
    for r in records:
      first.setdefault(r["prompt"], r)
    heldout = [first[p] for p in held]
    held_set = set(held)
    records = [r for r in records if r["prompt"] not in held_set]
    report.rows_kept = len(records)
  usable = len(records) - len(records) % shard_count
  shard_rows = usable // shard_count
  if shard_rows == 0:
    raise ValueError(
      f"data.source {source!r}: {len(records)} valid rows cannot fill {shard_count} shards "
      f"({report.metrics()['data/rows_skipped']} rows skipped)"
    )
  ds = grain.MapDataset.source(records)
  if shuffle:
    ds = ds.shuffle(seed=seed % 2**32)
  ds = ds[:usable][shard_index::shard_count]
  ds = ds.repeat(num_epochs)
  ds = ds.batch(batch_size, drop_remainder=drop_remainder, batch_fn=lambda rs: collate(rs, max_prompt_len, pad_id))
  ds = ds.map_with_index(lambda i, b: {**b, "index": i, "epoch": i * batch_size // shard_rows})
  if num_epochs is None:
    num_batches = None
  else:
    total = shard_rows * num_epochs
    num_batches = total // batch_size if drop_remainder else -(-total // batch_size)
  fingerprint = _fingerprint(
    records,
    batch_size=batch_size,
    seed=seed,
    shard_index=shard_index,
    shard_count=shard_count,
    num_epochs=num_epochs,
    max_prompt_len=max_prompt_len,
    shuffle=shuffle,
    drop_remainder=drop_remainder,
  )
  dataset = ds.to_iter_dataset(grain.ReadOptions(num_threads=0, prefetch_buffer_size=0))
  return PromptIterator(
    dataset,
    report,
    fingerprint,
    batch_size=batch_size,
    shard_rows=shard_rows,
    num_batches=num_batches,
    records=records,
    heldout=heldout,
  )
