"""The named evaluation sets of a run: which prompts each one scores, and their overlap with training.

The default set ("heldout") is, in order of precedence: `data.eval_source` when given; the test
split of a built-in task; else the held-out split of the training file (`data.eval_fraction`, by a
hash of the prompt text, see `maxnorm_jax.data.heldout`), which the training pipeline never yields.
`eval.sets` adds further sets, name -> source (a file, a glob, `sample:<name>` or `builtin:<task>`).
"""

from __future__ import annotations

import dataclasses
import logging
from typing import Any, Callable, Mapping, Sequence

from maxnorm_jax.data import build_pipeline, collate, load_records

log = logging.getLogger("maxnorm_jax.evaluation")

DEFAULT_SET = "heldout"


@dataclasses.dataclass
class EvalSet:
  """One evaluation set: its prompts (`batch`: collated `prompt_ids` [P, L], `prompt_mask`, `records`).

  prefix: where its metrics go ("eval" for the default set's single-set names, "eval/<name>").
  train_overlap: how many of its prompts' texts also occur in the training data.
  """

  name: str
  source: str
  batch: dict[str, Any]
  train_overlap: int

  @property
  def records(self) -> list[dict[str, Any]]:
    return self.batch["records"]

  @property
  def prefix(self) -> str:
    return f"eval/{self.name}"

  @property
  def overlap_key(self) -> str:
    return "eval/train_overlap" if self.name == DEFAULT_SET else f"eval/{self.name}/train_overlap"


def parse_sets(spec: str | Mapping[str, str] | None) -> dict[str, str]:
  """`eval.sets`: "name=source,name=source" (or a mapping) -> {name: source}; errors name the key."""
  if not spec:
    return {}
  if isinstance(spec, Mapping):
    items = [(str(k), str(v)) for k, v in spec.items()]
  elif isinstance(spec, str):
    items = []
    for part in filter(None, (p.strip() for p in spec.split(","))):
      name, eq, source = part.partition("=")
      if not eq:
        raise ValueError(f"config.eval.sets: {part!r} must be name=source")
      items.append((name.strip(), source.strip()))
  else:
    raise ValueError(f"config.eval.sets: must be 'name=source,...' or a mapping, got {type(spec).__name__}")
  out: dict[str, str] = {}
  for name, source in items:
    if not name or not all(ch.isalnum() or ch in "_-." for ch in name):
      raise ValueError(f"config.eval.sets: set name {name!r} must be non-empty letters, digits, '_', '-', '.'")
    if name == DEFAULT_SET or name in out:
      raise ValueError(f"config.eval.sets: set name {name!r} is taken (the default set is {DEFAULT_SET!r})")
    if not source:
      raise ValueError(f"config.eval.sets.{name}: empty source")
    out[name] = source
  return out


def _loader_kwargs(c: Any, tokenizer, fields, prompt_format) -> dict[str, Any]:
  return dict(
    tokenizer=tokenizer,
    fields=fields,
    prompt_format=prompt_format,
    skip_bad_rows=c.data.skip_bad_rows,
    max_prompt_len=c.data.max_prompt_len,
  )


def _source_batch(c: Any, source: str, pad_id: int, **kw) -> dict[str, Any]:
  """The first eval.num_prompts prompts of a source: a built-in task's test split (drawn by the run's
  seed), or a file's rows in file order (each at most once)."""
  n = c.eval.num_prompts
  if source.startswith("builtin:"):
    it = build_pipeline(
      source, batch_size=n, seed=c.seed, shard_index=0, shard_count=1, split="test", builtin_n=n, num_epochs=None, **kw
    )
    return next(it)
  records, _ = load_records(source, seed=c.seed, **kw)
  if not records:
    raise ValueError(f"evaluation source {source!r} has no valid rows")
  return collate(records[:n], kw["max_prompt_len"], pad_id)


def build_eval_sets(
  c: Any,
  *,
  train_source: str,
  train_pipeline: Any,
  tokenizer: Any,
  fields: Any,
  prompt_format: Any,
  resolve_source: Callable[[str], str],
) -> list[EvalSet]:
  """The run's evaluation sets, the default one first (see the module docstring).

  train_pipeline: the training `PromptIterator` (its `records` are what training draws from, its
  `heldout` the held-out split of a file dataset). Warns loudly when a set shares prompts with training.
  """
  kw = _loader_kwargs(c, tokenizer, fields, prompt_format)
  pad_id = tokenizer.pad_id if tokenizer.pad_id is not None else 0
  named: list[tuple[str, str, dict[str, Any]]] = []
  if c.data.eval_source:
    source = resolve_source(c.data.eval_source)
    named.append((DEFAULT_SET, source, _source_batch(c, source, pad_id, **kw)))
  elif train_source.startswith("builtin:"):
    named.append((DEFAULT_SET, train_source, _source_batch(c, train_source, pad_id, **kw)))
  else:
    if not train_pipeline.heldout:
      raise ValueError("config.data.eval_fraction: the file dataset has no held-out split; set data.eval_source")
    named.append((DEFAULT_SET, train_source, collate(train_pipeline.heldout, kw["max_prompt_len"], pad_id)))
  for name, source in parse_sets(c.eval.sets).items():
    source = resolve_source(source)
    named.append((name, source, _source_batch(c, source, pad_id, **kw)))
  train_prompts = {r["prompt"] for r in train_pipeline.records}
  sets = []
  for name, source, batch in named:
    overlap = sum(r["prompt"] in train_prompts for r in batch["records"])
    if overlap:
      log.warning(
        "EVALUATION SET %r (%s) IS NOT HELD OUT: %d of its %d prompts also occur in the training data (%s); "
        "its scores measure memorisation, not generalisation",
        name,
        source,
        overlap,
        len(batch["records"]),
        train_source,
      )
    sets.append(EvalSet(name, source, batch, overlap))
  return sets


def eval_prompt_rows(sets: Sequence[EvalSet]) -> list[dict[str, Any]]:
  """One row per evaluated prompt (DIR/eval_prompts.jsonl): set, source, prompt, location, id if any."""
  rows = []
  for s in sets:
    for r in s.records:
      row = {"set": s.name, "source": s.source, "prompt": r["prompt"], "location": r.get("location")}
      if r.get("id") is not None:
        row["id"] = r["id"]
      rows.append(row)
  return rows
