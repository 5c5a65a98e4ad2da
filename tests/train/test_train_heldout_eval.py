"""The trainer on a file dataset: the held-out split is evaluated, never trained on (also after a
resume), recorded in eval_prompts.jsonl, and every evaluation set's metrics are logged."""

import json
import logging
import os

import pytest
from trainer_helpers import read_rows, runlocal_config

from maxnorm_jax.testing.datasets import write_arith_jsonl
from maxnorm_jax.train import Trainer, train


def _config(source, **data):
  c = runlocal_config(
    train={"steps": 2},
    sft={"steps": 2},
    eval={"every": 2, "num_prompts": 8, "sets": "arith=builtin:arith", "pass_k": (1, 2)},
    checkpoint={"every": 2},
  )
  c.data.source = source
  c.data.builtin_n = 0
  c.data.eval_fraction = 0.1
  c.reward.verifier = "arith"
  for k, v in data.items():
    c.data[k] = v
  return c


@pytest.fixture(scope="module")
def file_run(tmp_path_factory):
  root = tmp_path_factory.mktemp("heldout_run")
  source = write_arith_jsonl(root / "train.jsonl")
  workdir = str(root / "run")
  train(_config(source), workdir)
  return source, workdir


def test_heldout_split_is_evaluated_and_recorded(file_run):
  source, workdir = file_run
  rows = read_rows(workdir)
  with open(os.path.join(workdir, "eval_prompts.jsonl")) as f:
    prompts = [json.loads(line) for line in f]
  held = [p for p in prompts if p["set"] == "heldout"]
  assert 1 <= len(held) <= 8 and all(p["source"] == source and p["id"].startswith("row") for p in held)
  assert len([p for p in prompts if p["set"] == "arith"]) == 8
  evals = [r for r in rows if "eval/reward_mean" in r]
  assert [r["step"] for r in evals] == [0, 2]
  for r in evals:
    assert r["eval/train_overlap"] == 0.0 and r["eval/arith/train_overlap"] == 0.0
    assert r["eval/heldout/mean@2_n"] == len(held) and r["eval/arith/mean@2_n"] == 8.0
    assert r["eval/heldout/mean@2"] == pytest.approx(r["eval/reward_mean"])
    assert r["eval/heldout/greedy_acc"] == pytest.approx(r["eval/pass@1"])
    for name in ("pass@1", "pass@2", "maj@1", "maj@2", "greedy_acc"):
      for s in ("heldout", "arith"):
        assert 0.0 <= r[f"eval/{s}/{name}"] <= 1.0 and r[f"eval/{s}/{name}_std"] >= 0.0


def test_training_never_sees_the_heldout_split_after_resume(file_run):
  source, workdir = file_run
  c = _config(source)
  c.train.steps = 4
  c.checkpoint.allow_changed = "train.steps"  # a longer run resuming the same experiment
  trainer = Trainer(c, workdir)
  try:
    assert trainer.restore_or_start() and trainer.step == 2
    held = {r["prompt"] for r in trainer.eval_sets[0].records}
    with open(os.path.join(workdir, "eval_prompts.jsonl")) as f:
      assert held == {json.loads(line)["prompt"] for line in f if '"heldout"' in line}
    for _ in range(60):  # several epochs of the resumed training pipeline
      assert not held & {r["prompt"] for r in next(trainer.pipeline)["records"]}
  finally:
    trainer.close()


def test_eval_pointed_at_the_training_file_warns_and_logs_the_overlap(file_run, caplog, tmp_path):
  source, _ = file_run
  with caplog.at_level(logging.WARNING, logger="maxnorm_jax.evaluation"):
    trainer = Trainer(_config(source, eval_source=source), str(tmp_path / "unused"))
  try:
    assert any("IS NOT HELD OUT" in r.getMessage() for r in caplog.records)
    metrics = trainer.evaluate()
    assert metrics["eval/train_overlap"] == 8.0 and metrics["eval/arith/train_overlap"] == 0.0
  finally:
    trainer.close()
