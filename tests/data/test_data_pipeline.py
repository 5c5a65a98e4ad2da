"""The grain prompt pipeline: bad rows in every file format, skip counting, save/restore, sharding."""

import json
import os

import numpy as np
import pytest

from maxnorm_jax.data import (
  SAMPLE_FILES,
  BadRowError,
  CharTokenizer,
  FieldMap,
  PlainFormat,
  build_pipeline,
  field_map,
  load_records,
)

TOK = CharTokenizer()
GOOD = [{"prompt": f"{i}+1=", "answer": str(i + 1), "task": "arith"} for i in range(10)]


def write_jsonl(path, lines):
  with open(path, "w") as f:
    for line in lines:
      f.write((line if isinstance(line, str) else json.dumps(line)) + "\n")
  return str(path)


def write_parquet(path, rows):
  import pyarrow as pa
  import pyarrow.parquet as pq

  pq.write_table(pa.Table.from_pylist(rows), str(path))
  return str(path)


def write_array_record(path, payloads):
  from array_record.python.array_record_module import ArrayRecordWriter

  w = ArrayRecordWriter(str(path), "group_size:1")
  for p in payloads:
    w.write(p if isinstance(p, bytes) else json.dumps(p).encode())
  w.close()
  return str(path)


def write_hf(path, rows, split=None):
  import datasets

  ds = datasets.Dataset.from_list(rows)
  (datasets.DatasetDict({split: ds}) if split else ds).save_to_disk(str(path))
  return str(path)


def load(path, **kw):
  kw.setdefault("max_prompt_len", 16)
  return load_records(path, TOK, **kw)


@pytest.mark.parametrize(
  "line, message, kind",
  [
    ("{not json", r"invalid JSON", "invalid_json"),
    ('{"answer": "1", "task": "arith"}', r"missing field 'prompt' \(column 'prompt'\)", "missing_field"),
    ('{"prompt": "  ", "answer": "1", "task": "arith"}', r"empty field 'prompt'", "empty_field"),
    ('{"prompt": "1+1=", "answer": "", "task": "arith"}', r"empty field 'answer'", "empty_field"),
    (
      '{"prompt": ["1+1="], "answer": "2", "task": "arith"}',
      r"field 'prompt' \(column 'prompt'\) must be a string, got list",
      "wrong_type",
    ),
    ('{"prompt": "1+1=", "answer": "2"}', r"missing field 'task'", "missing_field"),
    ("[1, 2]", r"row must be an object, got list", "wrong_type"),
    ('{"prompt": "1+1=", "answer": "2", "task": "code", "tests": 5}', r"field 'tests' .* got int", "wrong_type"),
    (
      '{"prompt": "1+1=", "answer": "2", "task": "code", "tests": [{"input": 1}]}',
      r"field 'tests' \(column 'tests'\) item 0 must be",
      "wrong_type",
    ),
    (
      '{"prompt": "' + "9" * 20 + '", "answer": "2", "task": "arith"}',
      r"prompt has 21 tokens, over max_prompt_len=16",
      "prompt_too_long",
    ),
  ],
)
def test_jsonl_bad_row_names_file_and_line(tmp_path, line, message, kind):
  path = write_jsonl(tmp_path / "d.jsonl", [GOOD[0], "", GOOD[1], line, GOOD[2]])
  with pytest.raises(BadRowError, match=rf"^{path}:4: {message}") as e:
    load(path)
  assert e.value.kind == kind and e.value.location == f"{path}:4"
  records, report = load(path, skip_bad_rows=True)
  assert [r["prompt"] for r in records] == ["0+1=", "1+1=", "2+1="]
  assert [r["location"] for r in records] == [f"{path}:1", f"{path}:3", f"{path}:5"]
  assert report.metrics() == {
    "data/rows_read": 4,
    "data/rows_kept": 3,
    "data/rows_skipped": 1,
    f"data/skipped/{kind}": 1,
  }


def test_skip_counts_every_reason_in_metrics(tmp_path):
  path = write_jsonl(
    tmp_path / "d.jsonl", GOOD[:5] + ["{bad", "{bad2", {"prompt": "x"}, {"prompt": "1=", "answer": 3, "task": True}]
  )
  it = build_pipeline(
    path, tokenizer=TOK, batch_size=5, skip_bad_rows=True, shard_index=0, shard_count=1, max_prompt_len=8, num_epochs=1
  )
  assert it.metrics() == {
    "data/rows_read": 9,
    "data/rows_kept": 5,
    "data/rows_skipped": 4,
    "data/skipped/invalid_json": 2,
    "data/skipped/missing_field": 1,
    "data/skipped/wrong_type": 1,
  }
  assert it.shard_rows == 5 and it.num_batches == 1
  # {"prompt": "1=", "answer": 3, "task": True} -> answer int is accepted as "3", task bool is not
  assert it.report.examples[-1].endswith("field 'task' (column 'task') must be a string, got bool")


def test_parquet_bad_rows(tmp_path):
  rows = GOOD[:3] + [{"prompt": None, "answer": "1", "task": "arith"}, {"prompt": "", "answer": "1", "task": "arith"}]
  path = write_parquet(tmp_path / "d.parquet", rows)
  with pytest.raises(BadRowError, match=rf"^{path}:row 4: missing field 'prompt'"):
    load(path)
  records, report = load(path, skip_bad_rows=True)
  assert [r["answer"] for r in records] == ["1", "2", "3"]
  assert report.metrics()["data/skipped/missing_field"] == 1
  assert report.metrics()["data/skipped/empty_field"] == 1


def test_array_record_bad_rows(tmp_path):
  path = write_array_record(tmp_path / "d.array_record", GOOD[:2] + [b"\xff\xfe", {"prompt": "3+1=", "task": "arith"}])
  with pytest.raises(BadRowError, match=rf"^{path}:record 3: invalid JSON"):
    load(path)
  records, report = load(path, skip_bad_rows=True)
  assert [r["location"] for r in records] == [f"{path}:record 1", f"{path}:record 2"]
  assert report.metrics() == {
    "data/rows_read": 4,
    "data/rows_kept": 2,
    "data/rows_skipped": 2,
    "data/skipped/invalid_json": 1,
    "data/skipped/missing_field": 1,
  }


def test_hf_saved_dataset_and_split(tmp_path):
  rows = GOOD[:3] + [{"prompt": "4+1=", "answer": "", "task": "arith"}]
  path = write_hf(tmp_path / "ds", rows)
  with pytest.raises(BadRowError, match=rf"^{path}:row 4: empty field 'answer'"):
    load(path)
  assert len(load(path, skip_bad_rows=True)[0]) == 3
  dd = write_hf(tmp_path / "dd", GOOD[:4], split="validation")
  assert [r["prompt"] for r in load(dd, split="validation")[0]] == [g["prompt"] for g in GOOD[:4]]
  with pytest.raises(KeyError, match="splits \\['validation'\\]"):
    load(dd, split="train")


def test_field_mapping_nested_and_fixed_task(tmp_path):
  path = write_jsonl(tmp_path / "d.jsonl", [{"q": {"text": "5+5="}, "sol": "10"}])
  fields = FieldMap.from_config({"prompt": "q.text", "answer": "sol", "task": None, "task_value": "arith"})
  (rec,), _ = load(path, fields=fields)
  assert (rec["prompt"], rec["answer"], rec["task"], rec["tests"]) == ("5+5=", "10", "arith", None)
  with pytest.raises(KeyError, match="data.fields: unknown keys \\['question'\\]"):
    FieldMap.from_config({"question": "q"})


def test_samples_in_real_dataset_formats():
  expected = {
    "gsm8k": ("math", "72"),
    "math500": ("math", "\\left( 3, \\frac{\\pi}{2} \\right)"),
    "deepmath": ("math", "3"),
    "livecodebench": ("code", ""),
  }
  for name, (task, answer) in expected.items():
    records, report = load_records(SAMPLE_FILES[name], TOK, fields=field_map(name), max_prompt_len=2000)
    assert report.metrics()["data/rows_skipped"] == 0 and len(records) >= 3
    assert (records[0]["task"], records[0]["answer"]) == (task, answer)
  lcb, _ = load_records(SAMPLE_FILES["livecodebench"], TOK, fields="livecodebench", max_prompt_len=2000)
  assert lcb[1]["tests"] == [{"input": "3\n1 9 4\n", "output": "9\n"}, {"input": "1\n-7\n", "output": "-7\n"}]


def test_batch_layout_left_padded(tmp_path):
  path = write_jsonl(
    tmp_path / "d.jsonl",
    [{"prompt": "1+1=", "answer": "2", "task": "arith"}, {"prompt": "10+10=", "answer": "20", "task": "arith"}],
  )
  it = build_pipeline(
    path,
    tokenizer=TOK,
    batch_size=2,
    shuffle=False,
    num_epochs=1,
    shard_index=0,
    shard_count=1,
    max_prompt_len=10,
    prompt_format=PlainFormat("q:{prompt}"),
  )
  batch = next(it)
  assert batch["prompt_ids"].shape == (2, 10) and batch["prompt_ids"].dtype == np.int32
  np.testing.assert_array_equal(batch["prompt_lengths"], [7, 9])  # bos + "q:1+1="; bos + "q:10+10="
  np.testing.assert_array_equal(batch["prompt_mask"].sum(1), [7, 9])
  assert batch["prompt_mask"][0].tolist() == [False] * 3 + [True] * 7
  assert batch["prompt_ids"][0, :3].tolist() == [TOK.pad_id] * 3
  assert batch["prompt_ids"][0, 3] == TOK.bos_id
  assert TOK.decode(batch["prompt_ids"][1]) == "q:10+10="
  assert batch["records"][1]["prompt_text"] == "q:10+10=" and "prompt_ids" not in batch["records"][1]
  assert (batch["index"], batch["epoch"], it.num_batches) == (0, 0, 1)
  with pytest.raises(StopIteration):
    next(it)


def _key(batch):
  return [r["location"] for r in batch["records"]]


def test_save_and_restore_gives_the_same_batches():
  kw = dict(
    tokenizer=TOK, batch_size=6, seed=11, shard_index=1, shard_count=2, num_epochs=3, builtin_n=40, max_prompt_len=8
  )
  it = build_pipeline("builtin:arith", **kw)
  for _ in range(5):
    next(it)
  state = json.loads(json.dumps(it.get_state()))  # a state survives JSON (checkpoint metadata)
  expected = [next(it) for _ in range(4)]
  resumed = build_pipeline("builtin:arith", **kw)
  resumed.set_state(state)
  got = [next(resumed) for _ in range(4)]
  for a, b in zip(expected, got):
    assert _key(a) == _key(b) and a["index"] == b["index"] and a["epoch"] == b["epoch"]
    np.testing.assert_array_equal(a["prompt_ids"], b["prompt_ids"])
  # the whole run: 3 epochs x 20 prompts per shard, 6 per batch -> 10 batches
  assert it.num_batches == 10 and len(list(it)) == 10 - 9
  other = build_pipeline("builtin:arith", **{**kw, "seed": 12})
  with pytest.raises(ValueError, match="fingerprint"):
    other.set_state(state)


def test_shards_are_disjoint_equal_and_cover_each_epoch():
  n, shards, p = 50, 3, 4
  per_shard = []
  for i in range(shards):
    it = build_pipeline(
      "builtin:arith",
      tokenizer=TOK,
      batch_size=p,
      seed=5,
      shard_index=i,
      shard_count=shards,
      num_epochs=2,
      builtin_n=n,
      max_prompt_len=8,
      drop_remainder=False,
    )
    prompts = [r["prompt"] for b in it for r in b["records"]]
    assert len(prompts) == 2 * (n // shards) == 2 * it.shard_rows
    per_shard.append((prompts[: it.shard_rows], prompts[it.shard_rows :]))
  for epoch in range(2):
    sets = [set(s[epoch]) for s in per_shard]
    assert sum(map(len, sets)) == shards * (n // shards)
    assert not (sets[0] & sets[1] or sets[0] & sets[2] or sets[1] & sets[2])
  # each epoch is shuffled anew
  assert per_shard[0][0] != per_shard[0][1]


def test_default_shard_is_the_jax_process():
  it = build_pipeline("builtin:code", tokenizer=TOK, batch_size=4, seed=0, num_epochs=1, max_prompt_len=80)
  assert it.shard_rows == 80 and it.num_batches == 20
  batch = next(it)
  assert all(r["task"] == "code" and r["tests"] for r in batch["records"])


def test_argument_errors(tmp_path):
  with pytest.raises(KeyError, match="unknown built-in task"):
    build_pipeline("builtin:nope", tokenizer=TOK, batch_size=2, shard_index=0, shard_count=1)
  with pytest.raises(FileNotFoundError, match="missing.jsonl: no such file"):
    build_pipeline(str(tmp_path / "missing.jsonl"), tokenizer=TOK, batch_size=2, shard_index=0, shard_count=1)
  with pytest.raises(ValueError, match="shard_index 2 must lie in"):
    build_pipeline("builtin:arith", tokenizer=TOK, batch_size=2, shard_index=2, shard_count=2)
  path = write_jsonl(tmp_path / "d.jsonl", GOOD[:2])
  with pytest.raises(ValueError, match="2 valid rows cannot fill 3 shards"):
    build_pipeline(path, tokenizer=TOK, batch_size=2, shard_index=0, shard_count=3)
  os.mkdir(tmp_path / "empty")
  with pytest.raises(ValueError, match="not a Hugging Face dataset"):
    load(str(tmp_path / "empty"))


def test_several_sources_and_globs_in_order(tmp_path):
  write_jsonl(tmp_path / "a-1.jsonl", GOOD[:2])
  write_jsonl(tmp_path / "a-0.jsonl", GOOD[2:4])
  pq = write_parquet(tmp_path / "b.parquet", GOOD[4:6])
  records, report = load_records([str(tmp_path / "a-*.jsonl"), pq], TOK, max_prompt_len=8)
  assert [r["prompt"] for r in records] == [g["prompt"] for g in GOOD[2:4] + GOOD[:2] + GOOD[4:6]]
  assert records[0]["location"] == f"{tmp_path}/a-0.jsonl:1" and records[-1]["location"] == f"{pq}:row 2"
  with pytest.raises(FileNotFoundError, match="no file matches"):
    load_records(str(tmp_path / "z*.jsonl"), TOK)
  with pytest.raises(ValueError, match="unknown data file format"):
    load_records(write_jsonl(tmp_path / "c.txt", GOOD[:1]), TOK)


def test_endless_epochs_and_noisy_task_seed():
  it = build_pipeline(
    "builtin:arith_noisy",
    tokenizer=TOK,
    batch_size=4,
    seed=7,
    shard_index=0,
    shard_count=1,
    builtin_n=10,
    max_prompt_len=8,
  )
  assert it.num_batches is None
  batches = [next(it) for _ in range(8)]  # 32 prompts: epochs 0..3 of 10 prompts
  assert [b["epoch"] for b in batches] == [0, 0, 0, 1, 1, 2, 2, 2]
  prompts = [r["prompt"] for b in batches for r in b["records"]]
  assert sorted(prompts[:10]) == sorted(prompts[10:20]) and prompts[:10] != prompts[10:20]
  assert {r["seed"] for b in batches for r in b["records"]} == {7}


def test_pipeline_from_config_dict_and_configdict():
  import ml_collections

  from maxnorm_jax.data import pipeline_from_config, tokenizer_from_config

  cfg = ml_collections.ConfigDict(
    dict(
      source="builtin:arith",
      tokenizer="char",
      fields=None,
      format={"kind": "plain", "template": "{prompt}"},
      batch_size=3,
      seed=2,
      num_epochs=1,
      max_prompt_len=8,
      builtin_n=9,
      shard_index=0,
      shard_count=1,
    )
  )
  tok = tokenizer_from_config(cfg)
  assert isinstance(tok, type(TOK))
  it = pipeline_from_config(cfg, tok)
  direct = build_pipeline(
    "builtin:arith",
    tokenizer=TOK,
    batch_size=3,
    seed=2,
    num_epochs=1,
    max_prompt_len=8,
    builtin_n=9,
    shard_index=0,
    shard_count=1,
  )
  assert [_key(b) for b in it] == [_key(b) for b in direct] and it.num_batches == 3
  assert pipeline_from_config(cfg, tok, split="test").report.rows_kept == 9
  with pytest.raises(KeyError, match="data: unknown keys \\['batchsize'\\]"):
    pipeline_from_config({"source": "builtin:arith", "batchsize": 3}, tok)
  with pytest.raises(KeyError, match="data.batch_size must be set"):
    pipeline_from_config({"source": "builtin:arith"}, tok)


def test_unscorable_rows_fail_at_load_time_by_file_and_line(tmp_path):
  """Issue 12.5: such rows used to load, score 0 (rejected) for every sample and train on nothing."""
  import functools

  from maxnorm_jax.rewards.builtin import check_record

  check = functools.partial(check_record, default_task="arith")
  floats = write_parquet(tmp_path / "f.parquet", [{"prompt": 36, "answer": 37.0, "task": "arith"}])
  with pytest.raises(BadRowError, match=r"f.parquet:row 1: field 'answer' \(column 'answer'\) is a float \(37.0\)"):
    load_records(floats, TOK, check_record=check)
  ints = write_parquet(tmp_path / "i.parquet", [{"prompt": 36, "answer": 37, "task": "arith"}])
  records, _ = load_records(ints, TOK, check_record=check)
  assert records[0]["prompt"] == "36" and records[0]["answer"] == "37"
  rows = [
    GOOD[0],
    {**GOOD[1], "task": "chess"},
    {**GOOD[2], "answer": "x7"},
    {**GOOD[3], "task": "math", "answer": " "},
  ]
  path = write_jsonl(tmp_path / "u.jsonl", rows)
  with pytest.raises(BadRowError, match=r"u.jsonl:2: cannot be scored: no verifier for task 'chess'; known: \["):
    load_records(path, TOK, check_record=check)
  records, report = load_records(path, TOK, check_record=check, skip_bad_rows=True)
  assert [r["location"] for r in records] == [f"{path}:1"]
  assert report.metrics()["data/skipped/unscorable"] == 2 and report.metrics()["data/rows_skipped"] == 3
  with pytest.raises(BadRowError, match=r"v.jsonl:1: cannot be scored: task 'arith' needs an integer answer, got 'x7'"):
    load_records(write_jsonl(tmp_path / "v.jsonl", rows[2:3]), TOK, check_record=check)


def test_a_truncated_parquet_names_the_file(tmp_path):
  path = write_parquet(tmp_path / "t.parquet", GOOD)
  os.truncate(path, os.path.getsize(path) // 2)
  with pytest.raises(ValueError, match=r"t.parquet: cannot read this Parquet file after 0 rows"):
    load_records(path, TOK)
