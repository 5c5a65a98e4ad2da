"""The peer benchmarks' checkpoint (benchmarks/peers/make_checkpoint.py) and benchmarks/step.py --vs-trl's
config: the checkpoint loads back with issue 11's shape and a 64-id tokenizer, and the overrides are
valid config keys at 512 rows and 4 minibatches; benchmarks/rollout.py refuses zero timed runs."""

import json
import os
import sys

import jax
import numpy as np
import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from benchmarks import step as step_bench  # noqa: E402
from benchmarks.peers.make_checkpoint import make_checkpoint  # noqa: E402
from maxnorm_jax.data import load_tokenizer  # noqa: E402
from maxnorm_jax.models import hf  # noqa: E402
from maxnorm_jax.train.config_check import validate  # noqa: E402


def test_peer_checkpoint_has_issue_shape_and_loads(tmp_path):
  out = str(tmp_path / "ckpt")
  make_checkpoint(out, seed=0)
  with open(os.path.join(out, "config.json")) as f:
    config = json.load(f)
  assert (config["num_hidden_layers"], config["hidden_size"], config["intermediate_size"]) == (4, 256, 768)
  assert (config["num_attention_heads"], config["num_key_value_heads"], config["head_dim"]) == (4, 2, 64)
  assert (config["vocab_size"], config["tie_word_embeddings"], config["eos_token_id"]) == (64, True, 2)
  with open(os.path.join(out, "generation_config.json")) as f:
    assert json.load(f)["eos_token_id"] == 2
  tok = load_tokenizer(out)
  assert tok.vocab_size == 64 and tok.eos_id == 2
  assert len(tok.encode("24-27=")) == 6
  assert tok.decode([63]) == "~"
  model = hf.load(out)
  weights = model.weights()
  assert weights["embed"].shape == (64, 256)
  n = sum(int(np.prod(x.shape)) for x in jax.tree.leaves(weights))
  # embed 64*256 + final norm 256 + 4 layers of (q 256*256, k,v 256*128, o 256*256, mlp 3*256*768, 2 norms, qk norms)
  per_layer = 256 * 256 * 2 + 256 * 128 * 2 + 3 * 256 * 768 + 2 * 256 + 2 * 64
  assert n == 64 * 256 + 256 + 4 * per_layer


def test_vs_trl_overrides_are_valid_at_issue_shape():
  c = step_bench.load_config("method=grpo")
  c.unlock()
  step_bench.apply_overrides(c, step_bench.vs_trl_overrides("runs/bench_ckpt"))
  validate(c)
  assert c.data.batch_size * c.rollout.group_size == 512
  assert (c.data.max_prompt_len, c.rollout.max_new_tokens, c.train.minibatches) == (6, 64, 4)
  assert (c.loss.beta, c.advantage.estimator, c.model.kind) == (0.01, "grpo", "hf")
  assert (c.train.grad_accum, c.train.logprob_microbatches) == (1, 4)


def test_vs_trl_overrides_split_passes_into_microbatches():
  c = step_bench.load_config("method=grpo")
  c.unlock()
  step_bench.apply_overrides(c, step_bench.vs_trl_overrides("runs/bench_ckpt", grad_accum=4))
  validate(c)
  # 512 rows: 4 optimizer steps of 128 rows, each over 4 microbatches of 32; reference passes of 32 rows
  assert (c.train.minibatches, c.train.grad_accum, c.train.logprob_microbatches) == (4, 4, 16)


def test_rollout_bench_refuses_zero_timed_runs(monkeypatch, capsys):
  from benchmarks import rollout

  monkeypatch.setattr(sys, "argv", ["rollout.py", "--no-peers", "--tail-repeats", "0"])
  with pytest.raises(SystemExit) as exit_info:
    rollout.main()
  assert exit_info.value.code == 2
  assert "--tail-repeats must be at least 1 (timed runs after the untimed first call), got 0" in capsys.readouterr().err
