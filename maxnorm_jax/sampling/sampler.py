"""Autoregressive generation with a preallocated KV cache.

`generate` runs a jitted prefill over the (left-padded) prompts, then one jitted decode loop
(`lax.while_loop`) over a donated state holding the KV cache; the loop stops once every sequence
has produced `eos_id` or after `max_new_tokens`. All shapes are static.
"""

from __future__ import annotations

import functools
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct
from jax.sharding import Mesh

from maxnorm_jax.models import layers
from maxnorm_jax.models.config import ModelConfig
from maxnorm_jax.models.create import model_mesh
from maxnorm_jax.models.decoder import (
  Decoder,
  cast_weights,
  causal_mask,
  default_positions,
  embed_tokens,
  head_matrix,
)
from maxnorm_jax.parallel.mesh import auto_axes
from maxnorm_jax.parallel.rules import DEFAULT_RULES, Rules
from maxnorm_jax.parallel.sharding import batch_sharding, constrain, replicated
from maxnorm_jax.sampling.methods import SamplingMethod, make_method

KV_CACHE_AXES = (("batch", "kv_heads", "head_dim", "seq"), ("batch", "kv_heads", "seq", "head_dim"))


@struct.dataclass
class SampleOutput:
  """Generated completions.

  tokens [B, N] int32 (padding after the end), logprobs [B, N] float32 (0 where masked),
  mask [B, N] bool (the tokens up to and including eos), lengths [B] int32,
  truncated [B] bool (True when max_new_tokens was reached without eos),
  decode_steps [] int32: iterations the decode loop ran (it stops once every sequence ended),
  nonfinite_logits [] bool: some live row's logits held a NaN or an infinity (the samples are then
  garbage: `check_finite(out)` raises; computed on device, read once per call, not per step).
  """

  tokens: jax.Array
  logprobs: jax.Array
  mask: jax.Array
  lengths: jax.Array
  truncated: jax.Array
  decode_steps: jax.Array
  nonfinite_logits: jax.Array


@struct.dataclass
class DecodeState:
  """The decode loop's carry. caches: per layer (k [B,K,D,S], v [B,K,S,D])."""

  caches: tuple
  key_mask: jax.Array  # [B, S] bool
  tokens: jax.Array  # [B, N]
  logprobs: jax.Array  # [B, N]
  valid: jax.Array  # [B, N]
  done: jax.Array  # [B]
  positions: jax.Array  # [B]: position of the token fed in the next step
  step: jax.Array  # scalar: index of the token the next step samples
  key: jax.Array
  nonfinite: jax.Array  # scalar bool: some live row sampled from non-finite logits


def _head_logits(cfg: ModelConfig, w, h: jax.Array) -> jax.Array:
  """h [B, E] -> float32 logits [B, V]."""
  return jnp.einsum("be,ev->bv", h, head_matrix(cfg, w).astype(h.dtype), preferred_element_type=jnp.float32)


@functools.partial(jax.jit, static_argnames=("cfg", "method", "max_new_tokens", "eos_id", "pad_id", "mesh", "rules"))
def _prefill(cfg, method, max_new_tokens, eos_id, pad_id, mesh, rules, w, prompt_ids, prompt_mask, key):
  b, p = prompt_ids.shape
  n = max_new_tokens
  s = p + n
  positions = default_positions(prompt_ids, prompt_mask)
  cos, sin = layers.rope_cos_sin(cfg, positions)
  mask = causal_mask(prompt_mask, b, p)
  x = embed_tokens(cfg, w, prompt_ids)
  caches = []
  for lw in w["layers"]:
    x, (k, v), _ = layers.layer_forward(cfg, cast_weights(cfg, lw), x, cos, sin, mask)
    kc = jnp.pad(jnp.transpose(k, (0, 2, 3, 1)), ((0, 0), (0, 0), (0, 0), (0, n)))
    vc = jnp.pad(jnp.transpose(v, (0, 2, 1, 3)), ((0, 0), (0, 0), (0, n), (0, 0)))
    caches.append((constrain(kc, KV_CACHE_AXES[0], mesh, rules), constrain(vc, KV_CACHE_AXES[1], mesh, rules)))
  h = layers.rms_norm(x[:, -1], w["final_norm"].astype(x.dtype), cfg.rms_norm_eps)
  key, sub = jax.random.split(key)
  logits = _head_logits(cfg, w, h)
  token, logp = method.sample(logits, sub)
  done = token == eos_id if eos_id is not None else jnp.zeros((b,), bool)
  tokens = jnp.full((b, n), pad_id, jnp.int32).at[:, 0].set(token)
  return DecodeState(
    caches=tuple(caches),
    key_mask=jnp.pad(prompt_mask.astype(bool), ((0, 0), (0, s - p))),
    tokens=tokens,
    logprobs=jnp.zeros((b, n), jnp.float32).at[:, 0].set(logp),
    valid=jnp.zeros((b, n), bool).at[:, 0].set(True),
    done=done,
    positions=positions[:, -1] + 1,
    step=jnp.ones((), jnp.int32),
    key=key,
    nonfinite=~jnp.all(jnp.isfinite(logits)),
  )


@functools.partial(
  jax.jit,
  static_argnames=("cfg", "method", "prompt_len", "eos_id", "pad_id"),
  donate_argnames=("state",),
)
def _decode(cfg, method, prompt_len, eos_id, pad_id, w, state: DecodeState) -> DecodeState:
  n = state.tokens.shape[1]
  decode_layers = [layers.fuse_weights(cfg, cast_weights(cfg, lw)) for lw in w["layers"]]
  # The head as [V, E]: "be,ve->bv" ran faster than "be,ev->bv" for a small batch here.
  head_t = (w["embed"] if cfg.tie_word_embeddings else w["lm_head"].T).astype(cfg.jnp_dtype)
  final_norm = w["final_norm"].astype(cfg.jnp_dtype)
  zero = jnp.zeros((), jnp.int32)

  def cond(st: DecodeState):
    return (st.step < n) & ~jnp.all(st.done)

  def body(st: DecodeState) -> DecodeState:
    step = st.step
    prev = jax.lax.dynamic_slice(st.tokens, (zero, step - 1), (st.tokens.shape[0], 1))  # [B,1]
    slot = prompt_len + step - 1
    key_mask = jax.lax.dynamic_update_slice(st.key_mask, jnp.ones((st.key_mask.shape[0], 1), bool), (zero, slot))
    cos, sin = layers.rope_cos_sin(cfg, st.positions[:, None])
    x = embed_tokens(cfg, w, prev)
    caches = []
    for lw, (kc, vc) in zip(decode_layers, st.caches):
      x, kc, vc = layers.layer_decode(cfg, lw, x, cos, sin, kc, vc, slot, key_mask)
      caches.append((kc, vc))
    h = layers.rms_norm(x[:, 0], final_norm, cfg.rms_norm_eps)
    logits = jnp.einsum("be,ve->bv", h, head_t, preferred_element_type=jnp.float32)
    if method.uses_key:
      key, sub = jax.random.split(st.key)
    else:  # no PRNG work in the greedy loop
      key, sub = st.key, None
    token, logp = method.sample(logits, sub)
    token = jnp.where(st.done, pad_id, token)
    logp = jnp.where(st.done, 0.0, logp)
    at = (zero, step)
    done = st.done | (token == eos_id) if eos_id is not None else st.done
    return DecodeState(
      caches=tuple(caches),
      key_mask=key_mask,
      tokens=jax.lax.dynamic_update_slice(st.tokens, token[:, None].astype(jnp.int32), at),
      logprobs=jax.lax.dynamic_update_slice(st.logprobs, logp[:, None], at),
      valid=jax.lax.dynamic_update_slice(st.valid, ~st.done[:, None], at),
      done=done,
      positions=st.positions + 1,
      step=step + 1,
      key=key,
      nonfinite=st.nonfinite | ~jnp.all(jnp.isfinite(logits) | st.done[:, None]),
    )

  return jax.lax.while_loop(cond, body, state)


def generate(
  model: Decoder,
  prompt_ids: Any,
  prompt_mask: Any,
  key: jax.Array,
  max_new_tokens: int,
  temperature: float = 1.0,
  top_p: float = 1.0,
  top_k: int = 0,
  eos_id: int | None = None,
  *,
  method: SamplingMethod | None = None,
  pad_id: int | None = None,
  mesh: Mesh | None = None,
  rules: Rules = DEFAULT_RULES,
) -> SampleOutput:
  """Samples up to `max_new_tokens` tokens after each prompt.

  Args:
    model: the decoder.
    prompt_ids, prompt_mask: [B, P] left-padded prompts (every row has at least one real token
      and its last column is real).
    key: PRNG key. temperature (0: greedy), top_p, top_k: the sampling method, unless `method`
      (a Greedy or Categorical) is given.
    eos_id: a sequence ends after producing it (included in its mask); None: never ends early.
    pad_id: filler after the end (default: eos_id, else 0).
    mesh, rules: shard the batch over the mesh's data axis (default: the model's mesh).

  Returns:
    SampleOutput with tokens, logprobs, mask [B, N], lengths and truncated [B], N = max_new_tokens.
  """
  if max_new_tokens < 1:
    raise ValueError(f"max_new_tokens must be >= 1, got {max_new_tokens}")
  cfg = model.config
  method = method if method is not None else make_method(temperature, top_p, top_k)
  pad_id = pad_id if pad_id is not None else (eos_id if eos_id is not None else 0)
  mesh = mesh if mesh is not None else model_mesh(model)
  mesh = auto_axes(mesh) if mesh is not None else None
  if isinstance(prompt_mask, np.ndarray) and prompt_mask.ndim == 2 and not prompt_mask[:, -1].all():
    rows = np.flatnonzero(~prompt_mask[:, -1].astype(bool)).tolist()
    raise ValueError(f"prompts must be left-padded: prompt_mask[:, -1] is False in rows {rows}")
  prompt_ids = jnp.asarray(prompt_ids, jnp.int32)
  prompt_mask = jnp.asarray(prompt_mask).astype(bool)
  if prompt_ids.ndim != 2 or prompt_ids.shape != prompt_mask.shape:
    raise ValueError(f"prompt_ids {prompt_ids.shape} and prompt_mask {prompt_mask.shape} must be equal [B, P]")
  if mesh is not None:
    rows = batch_sharding(mesh, rules, prompt_ids.shape)
    prompt_ids = jax.device_put(prompt_ids, rows)
    prompt_mask = jax.device_put(prompt_mask, rows)
    key = jax.device_put(key, replicated(mesh))
  return generate_from_weights(
    cfg,
    model.weights(),
    prompt_ids,
    prompt_mask,
    key,
    max_new_tokens,
    method=method,
    eos_id=eos_id,
    pad_id=pad_id,
    mesh=mesh,
    rules=rules,
  )


def generate_from_weights(
  cfg: ModelConfig,
  weights: Any,
  prompt_ids: jax.Array,
  prompt_mask: jax.Array,
  key: jax.Array,
  max_new_tokens: int,
  *,
  method: SamplingMethod,
  eos_id: int | None,
  pad_id: int,
  mesh: Mesh | None = None,
  rules: Rules = DEFAULT_RULES,
  chunks: int = 1,
) -> SampleOutput:
  """`generate` on a weights pytree (`Decoder.weights()` layout) and arrays already on devices.

  For the trainer: prompt_ids / prompt_mask [B, P] (int32 / bool, left-padded) may be global
  arrays that span several processes; nothing here reads them back to the host.
  chunks C > 1: the rows are sampled in C passes of B/C (rows c, c+C, ...: every pass keeps the
  batch's row sharding), so the KV cache is that of B/C rows; each pass has its own key.
  """
  if chunks > 1:
    if prompt_ids.shape[0] % chunks:
      raise ValueError(f"chunks={chunks} does not divide the {prompt_ids.shape[0]} rows")
    keys = jax.random.split(key, chunks)
    outs = [
      generate_from_weights(
        cfg, weights, i, m, keys[c], max_new_tokens, method=method, eos_id=eos_id, pad_id=pad_id, mesh=mesh, rules=rules
      )
      for c, (i, m) in enumerate(split_rows((prompt_ids, prompt_mask), chunks, mesh, rules))
    ]
    return merge_rows(outs, mesh, rules)
  state = _prefill(cfg, method, max_new_tokens, eos_id, pad_id, mesh, rules, weights, prompt_ids, prompt_mask, key)
  state = _decode(cfg, method, prompt_ids.shape[1], eos_id, pad_id, weights, state)
  lengths = jnp.sum(state.valid, axis=1, dtype=jnp.int32)
  return SampleOutput(
    tokens=state.tokens,
    logprobs=state.logprobs,
    mask=state.valid,
    lengths=lengths,
    truncated=~state.done,
    decode_steps=state.step - 1,
    nonfinite_logits=state.nonfinite,
  )


@functools.partial(jax.jit, static_argnames=("chunks", "mesh", "rules"))
def split_rows(tree: Any, chunks: int, mesh: Mesh | None, rules: Rules) -> tuple:
  """Every leaf [B, ...] of `tree` -> a tuple of C leaves [B/C, ...] (pass c: rows c, c+C, ...), each
  sharded by rows: a device's rows of each pass are among its own rows of the batch."""

  def split(x):
    parts = x.reshape(x.shape[0] // chunks, chunks, *x.shape[1:])
    return tuple(constrain(parts[:, c], ("batch",) + (None,) * (x.ndim - 1), mesh, rules) for c in range(chunks))

  leaves, treedef = jax.tree.flatten(tree)
  per_leaf = [split(x) for x in leaves]
  return tuple(jax.tree.unflatten(treedef, [p[c] for p in per_leaf]) for c in range(chunks))


@functools.partial(jax.jit, static_argnames=("mesh", "rules"))
def merge_rows(outs: list[SampleOutput], mesh: Mesh | None, rules: Rules) -> SampleOutput:
  """The inverse of `split_rows` on the passes' outputs (decode_steps: the longest pass)."""

  def merge(*parts):
    x = jnp.stack(parts, axis=1)
    return constrain(x.reshape(-1, *x.shape[2:]), ("batch",) + (None,) * (x.ndim - 2), mesh, rules)

  rows = ("tokens", "logprobs", "mask", "lengths", "truncated")
  merged = {k: merge(*(getattr(o, k) for o in outs)) for k in rows}
  return SampleOutput(
    **merged,
    decode_steps=jnp.max(jnp.stack([o.decode_steps for o in outs])),
    nonfinite_logits=jnp.any(jnp.stack([o.nonfinite_logits for o in outs])),
  )


def check_finite(out: SampleOutput) -> None:
  """FloatingPointError when `out` was sampled from NaN or infinite logits (one scalar read)."""
  if bool(jax.device_get(out.nonfinite_logits)):
    raise FloatingPointError(
      "sampling: the policy's logits held NaN or infinite values, so the sampled token ids are garbage "
      "(the weights have diverged: lower optim.lr, or check the checkpoint the run started from)"
    )
