"""The prompt record every data source yields, the field mapping, and row validation.

A record is a plain dict:

- ``prompt`` (str, non-empty): the question, before any chat template;
- ``answer`` (str; may be empty for code tasks);
- ``tests`` (code: a list of ``{"input": str, "output": str}`` or an assert-style str; else None);
- ``task`` (str): "arith", "arith_digits", "arith_noisy", "arith_mix", "code", or a dataset's own name ("math").

Extra keys (``seed``, ``kind``, ``id``, ``source``) pass through untouched. `validate_row` turns one raw row of
a file into a record or raises `BadRowError` naming the file and line of the row.
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any, Mapping

RECORD_KEYS = ("prompt", "answer", "tests", "task")


class BadRowError(ValueError):
  """A row that cannot become a record; the message names its file and line."""

  def __init__(self, location: str, reason: str, kind: str):
    super().__init__(f"{location}: {reason}")
    self.location = location
    self.reason = reason
    self.kind = kind  # short machine-readable reason, used as a metric key


@dataclasses.dataclass(frozen=True)
class FieldMap:
  """Which column of a source holds each record field (a dotted path reads nested dicts).

  `task` may name a column or, with `task_value`, be fixed for the whole source. A field mapped
  to None is absent from the source: `answer` then defaults to "" and `tests` to None.
  `required` lists the record fields that must be present and non-empty (a row with tests
  needs no answer). `answer_after` keeps the
  part of the answer after the marker's last occurrence (a row without the marker is bad).
  """

  prompt: str = "prompt"
  answer: str | None = "answer"
  tests: str | None = "tests"
  task: str | None = "task"
  task_value: str | None = None
  required: tuple[str, ...] = ("prompt", "answer")
  answer_after: str | None = None  # e.g. "####" (GSM8K): keep the text after its last occurrence

  @classmethod
  def from_config(cls, cfg: Mapping[str, Any] | None) -> "FieldMap":
    """A FieldMap from a dict (e.g. an ml_collections ConfigDict); unknown keys raise."""
    if cfg is None:
      return cls()
    cfg = dict(cfg)
    names = {f.name for f in dataclasses.fields(cls)}
    unknown = sorted(set(cfg) - names)
    if unknown:
      raise KeyError(f"data.fields: unknown keys {unknown}; known: {sorted(names)}")
    if "required" in cfg:
      cfg["required"] = tuple(cfg["required"])
    return cls(**cfg)


_MISSING = object()


def _lookup(row: Mapping[str, Any], path: str) -> Any:
  value: Any = row
  for part in path.split("."):
    if not isinstance(value, Mapping) or part not in value:
      return _MISSING
    value = value[part]
  return value


def _as_text(value: Any, field: str, column: str, location: str) -> str:
  if field == "answer" and isinstance(value, float):
    raise BadRowError(
      location,
      f"field 'answer' (column {column!r}) is a float ({value!r}); a float column turns 37 into '37.0' and "
      "rounds others: store answers as strings (or integers)",
      "wrong_type",
    )
  if isinstance(value, bool) or not isinstance(value, (str, int, float)):
    raise BadRowError(
      location, f"field {field!r} (column {column!r}) must be a string, got {type(value).__name__}", "wrong_type"
    )
  return str(value)


def _as_tests(value: Any, column: str, location: str) -> list[dict[str, str]] | str | None:
  if value is None or isinstance(value, str):
    if isinstance(value, str) and value.strip().startswith("["):
      try:  # datasets often store the test list as a JSON string
        value = json.loads(value)
      except json.JSONDecodeError as e:
        raise BadRowError(
          location, f"field 'tests' (column {column!r}) is not valid JSON: {e}", "invalid_json"
        ) from None
    else:
      return value
  if not isinstance(value, (list, tuple)):
    raise BadRowError(
      location,
      f"field 'tests' (column {column!r}) must be a list of {{input, output}} or a string, got {type(value).__name__}",
      "wrong_type",
    )
  tests = []
  for i, case in enumerate(value):
    if (
      not isinstance(case, Mapping) or not isinstance(case.get("input"), str) or not isinstance(case.get("output"), str)
    ):
      raise BadRowError(
        location, f"field 'tests' (column {column!r}) item {i} must be {{'input': str, 'output': str}}", "wrong_type"
      )
    tests.append({"input": case["input"], "output": case["output"]})
  return tests


def validate_row(row: Any, fields: FieldMap, location: str) -> dict[str, Any]:
  """The record of one raw row, or `BadRowError` naming `location` (e.g. "data.jsonl:12")."""
  if not isinstance(row, Mapping):
    raise BadRowError(location, f"row must be an object, got {type(row).__name__}", "wrong_type")
  record: dict[str, Any] = {}
  tests = _MISSING if fields.tests is None else _lookup(row, fields.tests)
  if tests is _MISSING:
    if "tests" in fields.required:
      raise BadRowError(location, f"missing field 'tests' (column {fields.tests!r})", "missing_field")
    record["tests"] = None
  else:
    record["tests"] = _as_tests(tests, fields.tests, location)
    if "tests" in fields.required and not record["tests"]:
      raise BadRowError(location, f"empty field 'tests' (column {fields.tests!r})", "empty_field")
  for field in ("prompt", "answer"):
    # a row with tests (a code problem) needs no reference answer
    required = field in fields.required and not (field == "answer" and record["tests"])
    column = getattr(fields, field)
    value = _MISSING if column is None else _lookup(row, column)
    if value is _MISSING or value is None:
      if required:
        raise BadRowError(location, f"missing field {field!r} (column {column!r})", "missing_field")
      record[field] = ""
      continue
    record[field] = _as_text(value, field, column, location)
    if field == "answer" and fields.answer_after is not None:
      head, marker, tail = record[field].rpartition(fields.answer_after)
      if not marker:
        raise BadRowError(
          location, f"field 'answer' (column {column!r}) has no {fields.answer_after!r}", "missing_field"
        )
      record[field] = tail.strip()
    if required and not record[field].strip():
      raise BadRowError(location, f"empty field {field!r} (column {column!r})", "empty_field")
  if fields.task_value is not None:
    record["task"] = fields.task_value
  else:
    task = _MISSING if fields.task is None else _lookup(row, fields.task)
    if task is _MISSING or task is None or task == "":
      raise BadRowError(
        location, f"missing field 'task' (column {fields.task!r}); map it or set fields.task_value", "missing_field"
      )
    record["task"] = _as_text(task, "task", fields.task, location)
  for key in ("seed", "kind", "id"):
    if key in row and key not in record:
      record[key] = row[key]
  return record
