"""Start-up checks of a trainer config: every bad value fails here, before anything is compiled,
with a message naming the config key."""

from __future__ import annotations

import math
from typing import Any

from maxnorm_jax.core import advantages, losses, protocol
from maxnorm_jax.parallel.mesh import check_axis_sizes
from maxnorm_jax.rewards.pool import MAX_DEADLINE_S
from maxnorm_jax.train import config_drift
from maxnorm_jax.train.optimizer import SCHEDULES

FILTER_MODES = ("none", "drop", "resample")
NONFINITE_ACTIONS = ("skip", "stop")
KL_PLACES = ("loss", "reward")
REQUIRED_SECTIONS = (
  "model",
  "mesh",
  "data",
  "reward",
  "rollout",
  "advantage",
  "protocol",
  "filter",
  "overlong",
  "loss",
  "train",
  "optim",
  "sft",
  "eval",
  "checkpoint",
  "log",
)


class ConfigError(ValueError):
  """A config value that cannot run; the message starts with the key."""


def _fail(key: str, message: str):
  raise ConfigError(f"config.{key}: {message}")


def _positive_int(c, key: str, minimum: int = 1):
  section, name = key.split(".")
  value = c[section][name]
  if not isinstance(value, int) or isinstance(value, bool) or value < minimum:
    _fail(key, f"must be an integer >= {minimum}, got {value!r}")


def _choice(c, key: str, choices):
  section, name = key.split(".")
  value = c[section][name]
  if value not in choices:
    _fail(key, f"must be one of {list(choices)}, got {value!r}")


def _nonneg(c, key: str):
  section, name = key.split(".")
  value = c[section][name]
  if not isinstance(value, (int, float)) or value < 0:
    _fail(key, f"must be a number >= 0, got {value!r}")


def _check_eval(c: Any) -> None:
  """data.eval_fraction, eval.sets, eval.pass_k, eval.bootstrap_resamples, eval.temperature."""
  from maxnorm_jax.evaluation import parse_sets

  f = c.data.eval_fraction
  if isinstance(f, bool) or not isinstance(f, (int, float)) or not 0 <= f < 1:
    _fail("data.eval_fraction", f"must be a number in [0, 1), got {f!r}")
  if not c.data.eval_source and not str(c.data.source).startswith("builtin:") and f == 0:
    _fail("data.eval_fraction", "0 holds nothing out of a file dataset; set data.eval_source or a fraction > 0")
  try:
    parse_sets(c.eval.sets)
  except ValueError as e:
    raise ConfigError(str(e)) from None
  ks = c.eval.pass_k
  if (
    not isinstance(ks, (list, tuple))
    or not ks
    or any(isinstance(k, bool) or not isinstance(k, int) or k < 1 for k in ks)
  ):
    _fail("eval.pass_k", f"must be a non-empty tuple of integers >= 1, got {ks!r}")
  _positive_int(c, "eval.bootstrap_resamples", 2)
  if not isinstance(c.eval.temperature, (int, float)) or not c.eval.temperature > 0:
    _fail("eval.temperature", f"must be > 0 (greedy completions are always scored too), got {c.eval.temperature!r}")


def _finite_numbers(c: Any) -> None:
  """Every number anywhere in the config must be finite (NaN compares False with everything, so a
  NaN would slip past each range check below)."""
  for key, value in config_drift.flatten(config_drift.plain(c)).items():
    if isinstance(value, float) and not math.isfinite(value):
      _fail(key, f"must be a finite number, got {value!r}")


def _in_range(c, key: str, low: float, high: float, low_open: bool = False, high_open: bool = False):
  section, name = key.split(".")
  value = c[section][name]
  ok = isinstance(value, (int, float)) and not isinstance(value, bool)
  ok = ok and (low < value if low_open else low <= value) and (value < high if high_open else value <= high)
  if not ok:
    interval = f"{'(' if low_open else '['}{low:g}, {high:g}{')' if high_open else ']'}"
    _fail(key, f"must lie in {interval}, got {value!r}")


#: Estimator parameters with a range: name -> (test, what the message says).
_PARAM_RANGES = {
  "tau_res": (lambda v: v > 0, "must be > 0"),
  "quantile": (lambda v: 0 < v <= 1, "must lie in (0, 1]"),
  "beta_comp_max": (lambda v: v > 0, "must be > 0"),
  "gamma": (lambda v: v >= 0, "must be >= 0"),
}


def _estimator_params(c) -> None:
  for key, value in c.advantage.params.items():
    if key in _PARAM_RANGES:
      test, what = _PARAM_RANGES[key]
      if not isinstance(value, (int, float)) or isinstance(value, bool) or not test(value):
        _fail(f"advantage.params.{key}", f"{what}, got {value!r}")


def validate(c: Any) -> None:
  """Raises ConfigError naming the first invalid key."""
  for s in REQUIRED_SECTIONS:
    if s not in c:
      _fail(s, "missing section")
  _finite_numbers(c)
  # model and mesh
  _choice(c, "model.kind", ("tiny", "hf"))
  if c.model.kind == "hf" and not c.model.path:
    _fail("model.path", "a Hugging Face checkpoint directory is required when model.kind='hf'")
  _model_preset_fields(c)
  _positive_int(c, "model.attention_chunk", 0)
  for key in ("hidden_size", "intermediate_size", "num_layers", "num_heads", "num_kv_heads", "head_dim"):
    _positive_int(c, f"model.{key}")
  if c.model.num_heads % c.model.num_kv_heads:
    _fail("model.num_heads", f"{c.model.num_heads} is not a multiple of model.num_kv_heads={c.model.num_kv_heads}")
  try:
    check_axis_sizes(dict(c.mesh))
  except ValueError as e:
    _fail(*str(e).split(": ", 1))
  # data, rollout, reward
  if not c.data.source:
    _fail("data.source", "must name a file, a glob or builtin:<task>")
  _positive_int(c, "data.batch_size")
  _positive_int(c, "data.max_prompt_len")
  _choice(c, "data.prompt_format", ("plain", "chat"))
  _positive_int(c, "rollout.group_size", 2)
  _positive_int(c, "rollout.max_new_tokens")
  if not c.rollout.temperature > 0:
    _fail("rollout.temperature", f"must be > 0 for sampling, got {c.rollout.temperature!r}")
  if not 0 < c.rollout.top_p <= 1:
    _fail("rollout.top_p", f"must lie in (0, 1], got {c.rollout.top_p!r}")
  _positive_int(c, "rollout.top_k", 0)
  _choice(c, "rollout.old_logp", ("sampler", "recompute"))
  _choice(c, "rollout.length_buckets", (True, False))
  _choice(c, "rollout.shared_prefill", (True, False))
  _positive_int(c, "reward.num_workers")
  _nonneg(c, "reward.timeout_s")
  if not c.reward.timeout_s <= MAX_DEADLINE_S:  # also refuses inf and nan
    _fail(
      "reward.timeout_s",
      f"must be a finite number of seconds <= {MAX_DEADLINE_S:g} (0: per-task default), got {c.reward.timeout_s!r}",
    )
  _positive_int(c, "reward.worker_memory_mb", 0)
  _in_range(c, "reward.max_rejected_frac", 0.0, 1.0)
  _choice(c, "reward.on_rejected", ("warn", "stop"))
  # advantage, protocol, filter
  name = c.advantage.estimator
  if name not in advantages.names():
    _fail("advantage.estimator", f"unknown estimator {name!r}; known: {advantages.names()}")
  allowed = advantages.params_of(name)
  for key in c.advantage.params:
    if key not in allowed:
      _fail(f"advantage.params.{key}", f"estimator {name!r} takes {sorted(allowed)}")
  _estimator_params(c)
  if not c.protocol.delta_res > 0:
    _fail("protocol.delta_res", f"must be > 0, got {c.protocol.delta_res!r}")
  _choice(c, "protocol.zero_group", protocol.ZERO_GROUP_MODES)
  _choice(c, "filter.mode", FILTER_MODES)
  _positive_int(c, "filter.max_rounds")
  _nonneg(c, "filter.collapse_std")
  _positive_int(c, "overlong.buffer_len")
  _nonneg(c, "overlong.penalty_factor")
  if c.overlong.buffer_len > c.rollout.max_new_tokens:
    _fail("overlong.buffer_len", f"{c.overlong.buffer_len} exceeds rollout.max_new_tokens={c.rollout.max_new_tokens}")
  # loss
  _choice(c, "loss.surrogate", losses.SURROGATES)
  _choice(c, "loss.aggregation", losses.AGGREGATION_MODES)
  _choice(c, "loss.kl_kind", losses.KL_KINDS)
  _choice(c, "loss.kl_in", KL_PLACES)
  for key in ("clip_low", "clip_high", "beta", "entropy_coef"):
    _nonneg(c, f"loss.{key}")
  if c.loss.dual_clip and c.loss.dual_clip <= 1:
    _fail("loss.dual_clip", f"must be 0 (off) or > 1, got {c.loss.dual_clip!r}")
  # train, optim, sft, eval, checkpoint, log
  _positive_int(c, "train.steps")
  _positive_int(c, "train.ppo_epochs")
  _positive_int(c, "train.minibatches")
  _positive_int(c, "train.grad_accum")
  _positive_int(c, "train.logprob_microbatches")
  rows = c.data.batch_size * c.rollout.group_size
  if rows % (c.train.minibatches * c.train.grad_accum):
    _fail(
      "train.minibatches",
      f"data.batch_size x rollout.group_size = {rows} sequences do not split into "
      f"{c.train.minibatches} minibatches x train.grad_accum={c.train.grad_accum}",
    )
  if rows % c.train.logprob_microbatches:
    _fail(
      "train.logprob_microbatches",
      f"data.batch_size x rollout.group_size = {rows} sequences do not split into {c.train.logprob_microbatches} passes",
    )
  _positive_int(c, "rollout.sample_chunks")
  _positive_int(c, "rollout.compact_every", 0)
  if rows % c.rollout.sample_chunks:
    _fail(
      "rollout.sample_chunks",
      f"data.batch_size x rollout.group_size = {rows} sequences do not split into {c.rollout.sample_chunks} passes",
    )
  if c.rollout.shared_prefill and c.data.batch_size % c.rollout.sample_chunks:
    _fail(
      "rollout.sample_chunks",
      f"with rollout.shared_prefill the {c.data.batch_size} prompts (data.batch_size) are split into the passes, "
      f"and they do not split into {c.rollout.sample_chunks}",
    )
  _choice(c, "train.on_nonfinite", NONFINITE_ACTIONS)
  if not c.optim.lr > 0:
    _fail("optim.lr", f"must be > 0, got {c.optim.lr!r}")
  _in_range(c, "optim.end_lr_frac", 0.0, 1.0)
  _in_range(c, "optim.b1", 0.0, 1.0, high_open=True)
  _in_range(c, "optim.b2", 0.0, 1.0, high_open=True)
  _in_range(c, "optim.eps", 0.0, 1.0, low_open=True)
  if not c.sft.lr > 0:
    _fail("sft.lr", f"must be > 0, got {c.sft.lr!r}")
  _positive_int(c, "sft.warmup_steps", 0)
  _positive_int(c, "optim.warmup_steps", 0)
  _choice(c, "optim.schedule", SCHEDULES)
  _nonneg(c, "optim.weight_decay")
  _nonneg(c, "optim.max_grad_norm")
  _positive_int(c, "sft.steps", 0)
  _positive_int(c, "sft.batch_size")
  _positive_int(c, "eval.every", 0)
  _positive_int(c, "eval.num_prompts")
  _positive_int(c, "eval.k")
  _check_eval(c)
  _positive_int(c, "checkpoint.every", 0)
  _positive_int(c, "checkpoint.max_to_keep")
  if not isinstance(c.checkpoint.allow_changed, str):
    _fail("checkpoint.allow_changed", f"must be a comma-separated string of keys, got {c.checkpoint.allow_changed!r}")
  known = config_drift.flatten(config_drift.plain(c))
  for key in config_drift.allowed_keys(c.checkpoint.allow_changed):
    if key not in known:
      _fail("checkpoint.allow_changed", f"{key!r} is not a config key")
  _positive_int(c, "log.diagnostics_every", 0)
  _positive_int(c, "log.cards_every", 0)
  if not isinstance(c.reference, str) or not c.reference:
    _fail("reference", f"must be 'init' or a checkpoint directory, got {c.reference!r}")


def _model_preset_fields(c: Any) -> None:
  """model.topology parses as a TPU slice; model.arch (when given) is a valid config.json."""
  from maxnorm_jax.models.config import ModelConfig
  from maxnorm_jax.plan.topology import parse_topology

  topology = c.model.get("topology", "")
  if not isinstance(topology, str):
    _fail("model.topology", f"must be a TPU slice name such as v5p-128 or '', got {topology!r}")
  if topology:
    try:
      parse_topology(topology)
    except ValueError as e:
      _fail("model.topology", str(e).replace("--topology ", ""))
  arch = c.model.get("arch", {})
  if not hasattr(arch, "items"):
    _fail("model.arch", f"must be a config.json mapping, got {arch!r}")
  if arch:
    d = arch.to_dict() if hasattr(arch, "to_dict") else dict(arch)
    try:
      ModelConfig.from_hf_dict(d)
    except (KeyError, ValueError, TypeError) as e:
      _fail("model.arch", str(e))
