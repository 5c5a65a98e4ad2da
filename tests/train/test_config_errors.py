"""Bad configs fail at start-up, before anything is compiled, with a message naming the key."""

import os
import re

import pytest
from trainer_helpers import config_module, run_main, runlocal_config

from maxnorm_jax.train import ConfigError, validate


@pytest.mark.parametrize(
  "arg, message",
  [
    ("method=grpoo", "unknown method 'grpoo'"),
    ("model=qwen9", "unknown model 'qwen9'"),
    ("task=chess", "unknown task 'chess'"),
    ("runlocal=maybe", "runlocal must be True or False"),
    ("colour=red", "unknown config argument 'colour'"),
    ("grpo", "must be key=value"),
  ],
)
def test_get_config_arguments(arg, message):
  with pytest.raises(ValueError, match=message):
    config_module().get_config(arg)


@pytest.mark.parametrize(
  "section, key, value, message",
  [
    ("loss", "aggregation", "token-sum", "config.loss.aggregation: must be one of"),
    ("loss", "kl_in", "advantage", "config.loss.kl_in: must be one of"),
    ("loss", "dual_clip", 0.5, "config.loss.dual_clip: must be 0"),
    ("advantage", "estimator", "ppo", "config.advantage.estimator: unknown estimator 'ppo'"),
    ("train", "minibatches", 3, "config.train.minibatches: data.batch_size x rollout.group_size = 16"),
    ("rollout", "group_size", 1, "config.rollout.group_size: must be an integer >= 2"),
    ("rollout", "sample_chunks", 3, "config.rollout.sample_chunks: data.batch_size x rollout.group_size = 16"),
    ("rollout", "compact_every", -1, "config.rollout.compact_every: must be an integer >= 0, got -1"),
    ("filter", "mode", "keep", "config.filter.mode: must be one of"),
    ("mesh", "pipeline", 2, "config.mesh.pipeline: unknown mesh axis"),
    ("overlong", "buffer_len", 99, "config.overlong.buffer_len: 99 exceeds rollout.max_new_tokens"),
    ("optim", "schedule", "linear", "config.optim.schedule: must be one of"),
    ("reward", "timeout_s", float("inf"), "config.reward.timeout_s: must be a finite number"),
    ("reward", "timeout_s", float("nan"), "config.reward.timeout_s: must be a finite number"),
    # Non-finite numbers and out-of-range values (issue 12.4): NaN slipped past every `x > 0` check.
    ("loss", "beta", float("nan"), "config.loss.beta: must be a finite number, got nan"),
    ("loss", "beta", float("inf"), "config.loss.beta: must be a finite number, got inf"),
    ("loss", "entropy_coef", float("nan"), "config.loss.entropy_coef: must be a finite number"),
    ("optim", "lr", float("inf"), "config.optim.lr: must be a finite number"),
    ("overlong", "penalty_factor", float("nan"), "config.overlong.penalty_factor: must be a finite number"),
    ("overlong", "penalty_factor", -5.0, "config.overlong.penalty_factor: must be a number >= 0"),
    ("protocol", "delta_res", float("inf"), "config.protocol.delta_res: must be a finite number"),
    ("optim", "b2", 1.0, "config.optim.b2: must lie in [0, 1), got 1.0"),
    ("eval", "temperature", 0.0, "config.eval.temperature: must be > 0"),
    (
      "rollout",
      "old_logp",
      "trainer",
      "config.rollout.old_logp: must be one of ['sampler', 'recompute'], got 'trainer'",
    ),
    ("train", "on_nonfinite", "ignore", "config.train.on_nonfinite: must be one of ['skip', 'stop'], got 'ignore'"),
    ("reward", "timeout_s", 2.0**31 / 1000, "config.reward.timeout_s: must be a finite number of seconds"),
    ("data", "eval_fraction", 1.0, "config.data.eval_fraction: must be a number in [0, 1)"),
    ("eval", "sets", "heldout=x.jsonl", "config.eval.sets: set name 'heldout' is taken"),
    ("eval", "sets", "gsm8k", "config.eval.sets: 'gsm8k' must be name=source"),
    ("eval", "pass_k", (1, 0), "config.eval.pass_k: must be a non-empty tuple of integers >= 1"),
    ("eval", "bootstrap_resamples", 1, "config.eval.bootstrap_resamples: must be an integer >= 2"),
    ("eval", "temperature", 0.0, "config.eval.temperature: must be > 0"),
    ("model", "topology", "v5p-7", "config.model.topology: 'v5p-7': v5p-N counts TensorCores"),
    ("model", "topology", "tpu9-8", "config.model.topology: 'tpu9-8': unknown TPU generation"),
    ("model", "arch", {"model_type": "llama"}, "config.model.arch: unknown model_type 'llama'"),
  ],
)
def test_validate_names_the_key(section, key, value, message):
  c = runlocal_config()
  c.unlock()
  c[section][key] = value
  with pytest.raises(ConfigError, match=re.escape(message)):
    validate(c)


def test_estimator_parameters_are_checked_by_name():
  c = runlocal_config("grpo")
  c.advantage.params.tau_res = 0.1  # grpo takes no tau_res
  with pytest.raises(ConfigError, match=r"config.advantage.params.tau_res: estimator 'grpo' takes"):
    validate(c)


@pytest.mark.parametrize("value, message", [(float("nan"), "must be a finite number"), (-0.1, "must be > 0")])
def test_estimator_parameter_ranges(value, message):
  c = runlocal_config("maxnorm_rloo")
  c.advantage.params.tau_res = value
  with pytest.raises(ConfigError, match=f"config.advantage.params.tau_res: {message}"):
    validate(c)


def test_every_row_validates():
  for method in config_module().METHODS:
    validate(runlocal_config(method))
    validate(config_module().get_config(f"method={method}"))


def test_cli_unknown_key_and_bad_value_fail_before_compiling(tmp_path):
  unknown = run_main(str(tmp_path / "a"), "--config.train.stepz=3", timeout=120)
  assert unknown.returncode != 0
  assert "stepz" in unknown.stderr
  bad = run_main(str(tmp_path / "b"), "--config.loss.kl_kind=k9", timeout=120)
  assert bad.returncode != 0
  assert "config.loss.kl_kind: must be one of ['k1', 'k2', 'k3'], got 'k9'" in bad.stderr
  assert "Compiling" not in bad.stderr and not os.path.exists(tmp_path / "b" / "checkpoints")
  wrong_type = run_main(str(tmp_path / "c"), "--config.train.steps=three", timeout=120)
  assert wrong_type.returncode != 0 and "train.steps" in wrong_type.stderr


def test_missing_hugging_face_checkpoint_names_the_key_and_the_variable(tmp_path, monkeypatch):
  from maxnorm_jax.train import Trainer

  monkeypatch.setenv("MAXNORM_HF_HOME", str(tmp_path))
  c = config_module().get_config("model=qwen2.5-0.5b,task=gsm8k,runlocal=True")
  assert c.model.path == "hf://Qwen/Qwen2.5-0.5B-Instruct" and c.mesh.fsdp == 4
  with pytest.raises(
    FileNotFoundError,
    match=r"config.data.tokenizer: hf://Qwen/Qwen2.5-0.5B-Instruct -> .* "
    r"does not exist.*MAXNORM_HF_HOME",
  ):
    Trainer(c, str(tmp_path / "run"))


def test_a_misspelt_key_in_a_method_row_fails_naming_it():
  from maxnorm_jax.method_rows import apply_row

  c = config_module().get_config()
  with pytest.raises(KeyError, match=r"METHODS\['typo'\].loss.clip_hihg: config.loss has no key 'clip_hihg'"):
    apply_row(c, "typo", dict(estimator="grpo", loss=dict(clip_hihg=0.3)))
  with pytest.raises(KeyError, match=r"METHODS\['typo'\].optimm: not a config section"):
    apply_row(c, "typo", dict(estimator="grpo", optimm=dict(lr=0.1)))


def test_row_keys_of_any_section_are_applied(monkeypatch):
  from maxnorm_jax import method_rows

  row = dict(
    estimator="rloo", protocol=dict(gate=False), optim=dict(lr=1e-5), train=dict(ppo_epochs=3), sft=dict(steps=7)
  )
  monkeypatch.setitem(method_rows.METHODS, "test_row", row)
  c = config_module().get_config("method=test_row")
  assert (c.advantage.estimator, c.protocol.gate, c.optim.lr, c.train.ppo_epochs, c.sft.steps) == (
    "rloo",
    False,
    1e-5,
    3,
    7,
  )
  assert c.optim.b1 == 0.9 and c.protocol.binning is True  # what the row does not set comes from the base config
  validate(c)


def test_the_config_is_locked_and_estimator_params_stay_open():
  c = config_module().get_config("method=grpo")
  with pytest.raises(AttributeError, match="stepz"):
    c.train.stepz = 3
  c.advantage.params.tau_res = 0.1  # allowed here, rejected by validate() for grpo (see above)
  assert c.advantage.params.tau_res == 0.1


def test_arguments_take_the_type_of_their_default():
  from maxnorm_jax.config_args import parse_arg

  a = parse_arg("n=3,x=0.5,name=abc,flag=True", n=1, x=1.0, name="s", flag=False, other=2)
  assert (a.n, a.x, a.name, a.flag, a.other) == (3, 0.5, "abc", True, 2)
  assert type(a.n) is int and type(a.x) is float and type(a.flag) is bool
  assert parse_arg("flag=false", flag=True).flag is False
  with pytest.raises(ValueError, match="config argument n must be int, got 'three'"):
    parse_arg("n=three", n=1)
  assert config_module().get_config("runlocal=true").runlocal is True
  assert config_module().get_config("runlocal=0").runlocal is False
