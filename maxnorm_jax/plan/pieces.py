"""Lower and compile every jitted piece of one RL step for a device set, from abstract inputs.

The pieces are the trainer's own jitted functions, called with the arguments the trainer gives
them (`train.loop.Trainer.rl_step`): the sampler's prefill and decode loop, the log-prob pass
(old policy, and the reference when loss.beta > 0), the advantage card and the PPO update.
"""

from __future__ import annotations

import dataclasses
import math
import os
import re
import sys
import time
from typing import Any

import jax
import jax.numpy as jnp
from jax.sharding import Mesh

from maxnorm_jax.models.config import ModelConfig
from maxnorm_jax.parallel.mesh import make_mesh
from maxnorm_jax.parallel.rules import logical_to_sharding
from maxnorm_jax.parallel.sharding import batch_sharding
from maxnorm_jax.plan import abstract as ab
from maxnorm_jax.sampling import Categorical
from maxnorm_jax.sampling import sampler as sampler_lib
from maxnorm_jax.train import specs
from maxnorm_jax.train import step as step_lib


@dataclasses.dataclass
class Piece:
  """One compiled function of the step and the per-chip bytes it holds.

  resident_bytes: state that stays on the chips while the piece runs without being one of its
  arguments (e.g. the optimiser state during sampling), added to its peak.
  """

  name: str
  compiled: Any
  args: Any
  calls: int
  resident_bytes: int
  compile_s: float

  @property
  def memory(self):
    return self.compiled.memory_analysis()

  @property
  def own_bytes(self) -> int:
    """Arguments + outputs - donated (aliased) + temporaries + code, per chip."""
    m = self.memory
    return (
      m.argument_size_in_bytes
      + m.output_size_in_bytes
      - m.alias_size_in_bytes
      + m.temp_size_in_bytes
      + m.generated_code_size_in_bytes
    )

  @property
  def peak_bytes(self) -> int:
    return self.own_bytes + self.resident_bytes

  @property
  def error(self) -> str | None:
    """The compiler's out-of-memory message when it refused the piece."""
    return self.compiled.message if isinstance(self.compiled, FailedCompile) else None

  def xla_flops_per_chip(self) -> float:
    """XLA's count (loop bodies counted once)."""
    cost = self.compiled.cost_analysis()
    cost = cost[0] if isinstance(cost, (list, tuple)) else cost
    return float((cost or {}).get("flops", 0.0))

  def largest_arguments(self, k: int = 3) -> list[tuple[str, int, tuple]]:
    """(path, per-chip bytes, global shape) of the largest argument arrays."""
    leaves = jax.tree_util.tree_flatten_with_path(self.args)[0]
    items = [(jax.tree_util.keystr(p), ab.shard_bytes(x), tuple(x.shape)) for p, x in leaves]
    return sorted(items, key=lambda t: -t[1])[:k]

  def largest_buffers(self, k: int = 5) -> list[tuple[str, int, str]]:
    """(HLO value, per-chip bytes, type) of the largest arrays in the compiled program."""
    return largest_hlo_values(self.compiled.as_text(), k)


_HLO_VALUE = re.compile(r"%([\w.\-]+) = (pred|s8|u8|s16|u16|s32|u32|s64|u64|bf16|f16|f32|f64)\[([\d,]*)\]")
_ITEMSIZE = dict(pred=1, s8=1, u8=1, s16=2, u16=2, bf16=2, f16=2, s32=4, u32=4, f32=4, s64=8, u64=8, f64=8)


def largest_hlo_values(hlo_text: str, k: int = 5) -> list[tuple[str, int, str]]:
  seen: dict[str, tuple[str, int, str]] = {}
  for name, dtype, dims in _HLO_VALUE.findall(hlo_text):
    size = _ITEMSIZE[dtype]
    for d in filter(None, dims.split(",")):
      size *= int(d)
    typ = f"{dtype}[{dims}]"
    if typ not in seen or seen[typ][1] < size:
      seen[typ] = (name, size, typ)
  return sorted(seen.values(), key=lambda t: -t[1])[:k]


@dataclasses.dataclass
class StepPlan:
  """Everything compiled for one step on one device set."""

  model: ModelConfig
  model_source: str
  mesh: Mesh
  rows: int  # B = P x G
  sample_chunks: int  # C: the sampler's passes of B/C rows (prefill and decode are compiled at B/C rows)
  prefill_rows: int  # rows one prefill call runs: P/C prompts with rollout.shared_prefill, else B/C
  prompt_len: int
  new_tokens: int
  param_count: int  # over the whole model
  param_bytes: int  # per chip
  opt_state_bytes: int
  reference_bytes: int
  kv_cache_bytes: int
  pieces: list[Piece]


def _checkpoint_dir(c) -> str | None:
  from maxnorm_jax.train.loop import resolve_path

  try:
    return resolve_path(c.model.path, "model.path") if c.model.path else None
  except FileNotFoundError:
    return None


def model_config_of(c) -> tuple[ModelConfig, str]:
  """The decoder of the config without loading weights: (config, where its shape came from)."""
  if c.model.kind == "tiny":
    from maxnorm_jax.data import load_tokenizer

    return specs.tiny_model_config(c, load_tokenizer("char").vocab_size), "config.model (tiny)"
  return specs.hf_model_config(c, _checkpoint_dir(c))


def _compile(name: str, fn, *args, **kwargs):
  t0 = time.perf_counter()
  try:
    compiled = fn.lower(*args, **kwargs).compile()
  except Exception as e:
    message = str(e)
    if "RESOURCE_EXHAUSTED" in message or "Ran out of memory" in message:
      return FailedCompile(message), time.perf_counter() - t0
    raise RuntimeError(f"piece {name!r} did not compile: {type(e).__name__}: {message}") from e
  return compiled, time.perf_counter() - t0


_USED = re.compile(r"Used ([\d.]+)([KMGT]?)(?:i?B)? of ([\d.]+)([KMGT]?)(?:i?B)? hbm")
_REQUIRED = re.compile(r"\(([\d.]+)([KMGT]?)\) exceeds available HBM")
_UNIT = {"": 1, "K": 1024, "M": 1024**2, "G": 1024**3, "T": 1024**4}


class FailedCompile:
  """Stands in for a Compiled when the compiler ran out of HBM: the bytes it reported as used."""

  def __init__(self, message: str):
    self.message = message
    m = _USED.search(message) or _REQUIRED.search(message)
    self.used_bytes = int(float(m.group(1)) * _UNIT[m.group(2)]) if m else 0

  def memory_analysis(self):
    return _Memory(temp_size_in_bytes=self.used_bytes)

  def cost_analysis(self):
    return {}

  def as_text(self) -> str:
    return ""

  @property
  def output_shardings(self):
    return None


@dataclasses.dataclass
class _Memory:
  argument_size_in_bytes: int = 0
  output_size_in_bytes: int = 0
  alias_size_in_bytes: int = 0
  temp_size_in_bytes: int = 0
  generated_code_size_in_bytes: int = 0


def _decode_state_shardings(state_shapes, mesh: Mesh, rules):
  """The decode state's layout when the prefill could not be compiled: caches by their logical
  axes (`sampler.KV_CACHE_AXES`), the rest by rows, scalars replicated."""

  def rows_or_rep(x):
    if x.ndim == 0 or not x.shape:
      return jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec())
    return batch_sharding(mesh, rules, x.shape)

  out = jax.tree.map(rows_or_rep, state_shapes)
  caches = tuple(
    tuple(
      tuple(logical_to_sharding(axes, rules, mesh, x.shape) for x in blocks)
      for axes, blocks in zip(sampler_lib.KV_CACHE_AXES, layer)
    )
    for layer in state_shapes.caches
  )
  return out.replace(caches=caches)


def _log(msg: str) -> None:
  if os.environ.get("MAXNORM_PLAN_VERBOSE"):
    print(f"[plan {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def compile_step(c, devices) -> StepPlan:
  """Compiles the RL step of config `c` on `devices` (real or abstract TPU devices)."""
  cfg, source = model_config_of(c)
  try:
    mesh = make_mesh(dict(c.mesh), devices=devices)
  except ValueError as e:
    raise ValueError(f"config.mesh: {e}") from None
  rules = specs.rules_of(c)
  p, g, n, length = c.data.batch_size, c.rollout.group_size, c.rollout.max_new_tokens, c.data.max_prompt_len
  b = p * g
  use_reference = c.loss.beta > 0
  eos_id = pad_id = cfg.vocab_size - 1  # any id: the ids are static and do not change a shape

  params = ab.abstract_params(cfg, mesh, rules)
  optimizer = specs.optimizer_of(c)
  opt_state = ab.abstract_opt_state(optimizer, params, mesh)
  state = ab.abstract_train_state(params, opt_state, c.advantage.estimator, mesh)
  param_bytes, opt_bytes = ab.tree_shard_bytes(params), ab.tree_shard_bytes(opt_state)
  ref_bytes = param_bytes if use_reference else 0
  ids = ab.rows((b, length), jnp.int32, mesh, rules)
  pmask = ab.rows((b, length), jnp.bool_, mesh, rules)
  key = ab.abstract_key(mesh)
  method = Categorical(
    temperature=float(c.rollout.temperature), top_p=float(c.rollout.top_p), top_k=int(c.rollout.top_k)
  )
  pieces: list[Piece] = []

  _log("prefill")
  chunks = c.rollout.sample_chunks
  # With the shared prefill (the trainer's default) a pass prefills its P/C prompts once and repeats
  # each prompt's cache over its G rows; without it, the B/C rows are prefilled one by one.
  shared = bool(c.rollout.shared_prefill)
  prefill_rows, samples = (p // chunks, g) if shared else (b // chunks, 1)
  pass_ids = ab.rows((prefill_rows, length), jnp.int32, mesh, rules)
  pass_mask = ab.rows((prefill_rows, length), jnp.bool_, mesh, rules)
  pre_args = (cfg, method, n, eos_id, pad_id, mesh, rules, params, pass_ids, pass_mask, key, samples)
  pre, t = _compile("prefill", sampler_lib._prefill, *pre_args)
  pieces.append(Piece("prefill", pre, (params, pass_ids, pass_mask, key), chunks, opt_bytes + ref_bytes, t))

  state_shapes = jax.eval_shape(sampler_lib._prefill, *pre_args)
  state_shardings = pre.output_shardings or _decode_state_shardings(state_shapes, mesh, rules)
  decode_state = ab.with_sharding(state_shapes, state_shardings)
  kv_bytes = ab.tree_shard_bytes(decode_state.caches)
  _log("decode")
  dec, t = _compile("decode", sampler_lib._decode, cfg, method, length, eos_id, pad_id, params, decode_state)
  pieces.append(Piece("decode", dec, (params, decode_state), chunks, opt_bytes + ref_bytes, t))

  temperature = float(c.rollout.temperature)
  tokens = ab.rows((b, n), jnp.int32, mesh, rules)
  tmask = ab.rows((b, n), jnp.bool_, mesh, rules)
  # The old policy's pass runs only with rollout.old_logp="recompute" (by default the update uses the
  # sampler's log-probs); the reference's when loss.beta > 0. Both are one executable.
  logprob_pieces = ["old_logprobs"] if c.rollout.old_logp == "recompute" else []
  logprob_pieces += ["ref_logprobs"] if use_reference else []
  if logprob_pieces:
    _log("logprobs")
    m = c.train.logprob_microbatches
    lp_args = (params, ids, pmask, tokens, tmask)
    lp, t = _compile(
      "logprobs",
      step_lib.logprobs_fn(cfg),
      cfg,
      temperature,
      *lp_args,
      m,
      top_k=int(c.rollout.top_k),
      top_p=float(c.rollout.top_p),
      mesh=mesh,
      rules=rules,
    )
    for i, name in enumerate(logprob_pieces):  # the reference has the parameters' dtype and layout
      resident = opt_bytes + (ref_bytes if name == "old_logprobs" else param_bytes)
      pieces.append(Piece(name, lp, lp_args, 1, resident, t if i == 0 else 0.0))

  rewards = ab.replicated_like(jax.ShapeDtypeStruct((p, g), jnp.float32), mesh)
  card_spec = step_lib.CardSpec(
    estimator=c.advantage.estimator,
    params=tuple(sorted(specs.plain(c.advantage.params).items())),
    delta_res=float(c.protocol.delta_res),
    gate=bool(c.protocol.gate),
    binning=bool(c.protocol.binning),
    zero_group=c.protocol.zero_group,
    drop_collapsed=c.filter.mode == "drop",
    collapse_std=float(c.filter.collapse_std),
  )
  card_args = (rewards, ab.replicated_like(jax.ShapeDtypeStruct((p, g), jnp.bool_), mesh), state.estimator_state)
  card, t = _compile("advantage_card", step_lib.advantage_card, card_spec, *card_args)
  pieces.append(Piece("advantage_card", card, card_args, 1, param_bytes + opt_bytes + ref_bytes, t))

  spec = specs.update_spec_of(c, cfg, mesh, rules, optimizer)
  batch = ab.abstract_rollout(b, length, n, mesh, rules)
  hparams = ab.replicated_like({k: jax.ShapeDtypeStruct((), jnp.float32) for k in specs.hparam_values(c, cfg)}, mesh)
  update = step_lib.update_fn(spec, jax.tree.map(lambda x: x.sharding, state))
  _log("update")
  upd, t = _compile("update", update, state, batch, hparams)
  pieces.append(Piece("update", upd, (state, batch, hparams), 1, ref_bytes, t))

  return StepPlan(
    model=cfg,
    model_source=source,
    mesh=mesh,
    rows=b,
    sample_chunks=chunks,
    prefill_rows=prefill_rows,
    prompt_len=length,
    new_tokens=n,
    param_count=sum(math.prod(x.shape) for x in jax.tree.leaves(params)),
    param_bytes=param_bytes,
    opt_state_bytes=opt_bytes,
    reference_bytes=ref_bytes,
    kv_cache_bytes=kv_bytes,
    pieces=pieces,
  )
