"""The held-out split of a file dataset: deterministic, never yielded by the training pipeline (also
from a restored state), and the evaluation sets' overlap with training."""

import logging

import pytest

from maxnorm_jax.data import CharTokenizer, build_pipeline
from maxnorm_jax.data.heldout import heldout_prompts, prompt_hash
from maxnorm_jax.evaluation import build_eval_sets, eval_prompt_rows, parse_sets
from maxnorm_jax.testing.datasets import write_arith_jsonl


def test_heldout_prompts_by_hash_fraction_and_cap():
  prompts = [f"q{i}" for i in range(400)] + ["q1", "q2"]  # duplicates count once
  held = heldout_prompts(prompts, 0.1)
  assert held == heldout_prompts(list(reversed(prompts)), 0.1)  # order-free
  assert all(prompt_hash(p) < 0.1 for p in held) and 20 < len(held) < 60
  assert [prompt_hash(p) for p in held] == sorted(prompt_hash(p) for p in held)
  assert heldout_prompts(prompts, 0.1, cap=5) == held[:5]
  assert heldout_prompts(prompts, 0.0) == []
  tiny = ["a", "b", "c"]
  assert heldout_prompts(tiny, 1e-9) == [min(tiny, key=prompt_hash)]  # a small file still holds one out
  with pytest.raises(ValueError, match="two or more distinct prompts"):
    heldout_prompts(["same", "same"], 0.05)
  with pytest.raises(ValueError, match=r"data.eval_fraction must lie in \[0, 1\)"):
    heldout_prompts(tiny, 1.0)


def test_training_pipeline_never_yields_the_heldout_split_also_after_restore(tmp_path):
  path = write_arith_jsonl(tmp_path / "train.jsonl")
  kw = dict(
    tokenizer=CharTokenizer(), batch_size=7, seed=3, shard_index=0, shard_count=1, holdout_fraction=0.1, holdout_cap=8
  )
  it = build_pipeline(path, **kw)
  held = {r["prompt"] for r in it.heldout}
  assert 1 <= len(held) <= 8
  assert held == set(heldout_prompts([f"{a}+{b}=" for a, b in (divmod(i, 11) for i in range(120))], 0.1, 8))
  assert len(it.records) == 120 - len(held) and not held & {r["prompt"] for r in it.records}
  for _ in range(40):  # more than two epochs
    assert not held & {r["prompt"] for r in next(it)["records"]}
  state = it.get_state()
  expected = [r["prompt"] for r in next(it)["records"]]
  resumed = build_pipeline(path, **kw)
  resumed.set_state(state)
  assert {r["prompt"] for r in resumed.heldout} == held
  assert [r["prompt"] for r in next(resumed)["records"]] == expected
  for _ in range(40):
    assert not held & {r["prompt"] for r in next(resumed)["records"]}


class _Cfg(dict):
  __getattr__ = dict.__getitem__


def _config(source, eval_source="", sets=""):
  data = _Cfg(source=source, eval_source=eval_source, skip_bad_rows=False, max_prompt_len=8, eval_fraction=0.1)
  return _Cfg(seed=0, data=data, eval=_Cfg(num_prompts=8, sets=sets))


def _sets(c, path):
  tok = CharTokenizer()
  holdout = {} if c.data.eval_source else dict(holdout_fraction=0.1, holdout_cap=8)
  it = build_pipeline(path, tokenizer=tok, batch_size=4, shard_index=0, shard_count=1, **holdout)
  return build_eval_sets(
    c, train_source=path, train_pipeline=it, tokenizer=tok, fields=None, prompt_format=None, resolve_source=str
  )


def test_eval_sets_overlap_is_zero_on_the_split_and_warns_on_the_training_file(tmp_path, caplog):
  path = write_arith_jsonl(tmp_path / "train.jsonl")
  with caplog.at_level(logging.WARNING, logger="maxnorm_jax.evaluation"):
    sets = _sets(_config(path, sets="arith=builtin:arith"), path)
  assert [s.name for s in sets] == ["heldout", "arith"]
  assert [s.train_overlap for s in sets] == [0, 0] and not caplog.records
  assert len(sets[1].records) == 8 and all(r["location"].startswith("builtin:arith:test:") for r in sets[1].records)
  rows = eval_prompt_rows(sets)
  assert rows[0]["set"] == "heldout" and rows[0]["source"] == path and rows[0]["id"].startswith("row")
  assert len(rows) == len(sets[0].records) + 8 and "id" not in rows[-1]
  with caplog.at_level(logging.WARNING, logger="maxnorm_jax.evaluation"):
    sets = _sets(_config(path, eval_source=path), path)
  assert sets[0].train_overlap == 8 and sets[0].overlap_key == "eval/train_overlap"
  assert any("IS NOT HELD OUT" in r.getMessage() for r in caplog.records)


def test_parse_sets_errors_name_the_key():
  assert parse_sets("a=builtin:arith, b.c=x.jsonl") == {"a": "builtin:arith", "b.c": "x.jsonl"}
  assert parse_sets({"m": "sample:math500"}) == {"m": "sample:math500"}
  for bad, match in (
    ("a", "must be name=source"),
    ("heldout=x", "is taken"),
    ("a=x,a=y", "is taken"),
    ("a b=x", "set name"),
  ):
    with pytest.raises(ValueError, match=f"config.eval.sets.*{match}"):
      parse_sets(bad)
