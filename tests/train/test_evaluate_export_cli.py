"""`python -m maxnorm_jax.evaluate` on a saved run (the same metrics the trainer logged at that
step) and on an exported Hugging Face directory, and `maxnorm_jax.export` (transformers loads it
and gives our logits; the character tokenizer exports with the same ids)."""

import json
import os
import subprocess
import sys

import jax.numpy as jnp
import numpy as np
import pytest
from trainer_helpers import CONFIG_PATH, ROOT, child_env, read_rows, runlocal_config

from maxnorm_jax.data import CharTokenizer
from maxnorm_jax.export import export
from maxnorm_jax.models.decoder import hidden_states, logits_from_hidden
from maxnorm_jax.run_restore import restored_trainer, run_config
from maxnorm_jax.train import train


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
  workdir = str(tmp_path_factory.mktemp("cli_run") / "run")
  c = runlocal_config(train={"steps": 2}, sft={"steps": 2}, eval={"every": 2}, checkpoint={"every": 2})
  train(c, workdir)
  return workdir


def _cli(module, *args, timeout=600):
  proc = subprocess.run(
    [sys.executable, "-m", module, *args], cwd=ROOT, env=child_env(8), capture_output=True, text=True, timeout=timeout
  )
  assert proc.returncode == 0, proc.stderr[-3000:]
  return proc.stdout


def test_evaluate_cli_on_a_run_gives_the_metrics_the_trainer_logged(run_dir):
  out = _cli("maxnorm_jax.evaluate", f"--workdir={run_dir}")
  assert "step 2: 8 prompts" in out and "eval/reward_mean" in out
  with open(os.path.join(run_dir, "eval", "step_2_summary.json")) as f:
    summary = json.load(f)
  logged = [r for r in read_rows(run_dir) if r["step"] == 2][0]
  assert summary["step"] == 2
  evals = {k: v for k, v in logged.items() if k.startswith("eval/")}
  assert "eval/heldout/mean@2" in evals and "eval/heldout/maj@2_std" in evals
  assert summary["metrics"].keys() == evals.keys()
  for k, v in evals.items():
    assert summary["metrics"][k] == pytest.approx(v, abs=1e-9), k
  with open(os.path.join(run_dir, "eval", "step_2.jsonl")) as f:
    rows = [json.loads(line) for line in f]
  assert len(rows) == 8 and {r["set"] for r in rows} == {"heldout"}
  for r in rows:
    assert len(r["samples"]) == len(r["rewards"]) == len(r["answers"]) == len(r["correct"]) == 2
    assert r["prompt"].endswith("=") and isinstance(r["greedy"], str)
  mean = np.mean([r["rewards"] for r in rows])
  assert mean == pytest.approx(evals["eval/reward_mean"])
  with pytest.raises(AssertionError, match=r"--step=5: .* has checkpoints of steps \[2\]"):
    _cli("maxnorm_jax.evaluate", f"--workdir={run_dir}", "--step=5")


def test_export_loads_in_transformers_with_our_logits_and_tokenizer(run_dir, tmp_path):
  from transformers import AutoModelForCausalLM, AutoTokenizer

  out = str(tmp_path / "hf")
  step, files = export(run_dir, out)
  assert step == 2
  assert {"model.safetensors", "config.json", "tokenizer.json", "tokenizer_config.json"} <= set(files)
  with open(os.path.join(out, "maxnorm_jax_export.json")) as f:
    meta = json.load(f)
  assert meta["step"] == 2 and meta["prompt_format"] == "plain" and meta["tokenizer"] == "char"

  tok = AutoTokenizer.from_pretrained(out)
  char = CharTokenizer()
  for text in ("12+7=", "hello world\n(a-b)*3 <eos>"):
    assert tok.encode(text, add_special_tokens=False) == char.encode(text)
  assert (tok.eos_token_id, tok.pad_token_id, tok.bos_token_id) == (2, 0, 1)

  import torch

  model = AutoModelForCausalLM.from_pretrained(out, dtype=torch.float32)
  assert type(model).__name__ == "Qwen3ForCausalLM" and model.config.eos_token_id == 2
  ids = np.array([char.encode("12+7=19"), char.encode("3-45=-4")], np.int64)
  with torch.no_grad():
    ref = model(torch.tensor(ids)).logits.numpy()
  trainer, _ = restored_trainer(run_config(run_dir), run_dir, 2)
  try:
    cfg, w = trainer.model_cfg, trainer.state.params
    ours = np.asarray(logits_from_hidden(cfg, w, hidden_states(cfg, w, jnp.asarray(ids, jnp.int32))[0]))
  finally:
    trainer.close()
  assert ours.shape == ref.shape == (2, 7, char.vocab_size)
  assert np.max(np.abs(ours - ref)) < 1e-4


def test_evaluate_cli_on_an_exported_model(run_dir, tmp_path):
  hf_dir, out_dir = str(tmp_path / "hf"), str(tmp_path / "eval_of_hf")
  export(run_dir, hf_dir)
  _cli("maxnorm_jax.evaluate", f"--workdir={out_dir}", f"--model={hf_dir}", f"--config={CONFIG_PATH}:runlocal=True")
  with open(os.path.join(out_dir, "eval", "step_0_summary.json")) as f:
    summary = json.load(f)
  assert summary["model"] == os.path.abspath(hf_dir) and summary["step"] == 0
  logged = [r for r in read_rows(run_dir) if r["step"] == 2][0]
  # The same weights on the same held-out prompts: the greedy completions score the same.
  for k in ("eval/pass@1", "eval/greedy_reward_mean", "eval/heldout/greedy_acc"):
    assert summary["metrics"][k] == pytest.approx(logged[k]), k
  with open(os.path.join(out_dir, "eval", "step_0.jsonl")) as f:
    assert len(f.readlines()) == 8
