"""Autoregressive generation with a preallocated KV cache.

`generate` runs a jitted prefill over the (left-padded) prompts (`prefill`: each distinct prompt
once, its cache shared by its `num_samples` rows), then one jitted decode loop (`decode`: a
`lax.while_loop` over a donated state holding the KV cache); the loop stops once every sequence
has produced `eos_id` or after `max_new_tokens`. All shapes are static; with `compact_every`, the
loop runs in chunks and moves the live rows to a smaller power-of-two batch as rows end.
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
from maxnorm_jax.parallel.sharding import batch_sharding, constrain, constrain_rows, replicated
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
  garbage: `check_finite(out)` raises; computed on device, read once per call, not per step),
  row_steps [] int32: rows times steps the decode loop computed (B * decode_steps without compaction).
  """

  tokens: jax.Array
  logprobs: jax.Array
  mask: jax.Array
  lengths: jax.Array
  truncated: jax.Array
  decode_steps: jax.Array
  nonfinite_logits: jax.Array
  row_steps: jax.Array


@struct.dataclass
class DecodeState:
  """The decode loop's carry over B rows (B = prompts x num_samples, or a compacted bucket of them).

  caches: per layer (k blocks, v blocks): k [B, K, D, S_i], v [B, K, S_i, D], the cache's positions
  in blocks (`cache_blocks`) so that a step reads only the blocks written so far; sum S_i = S =
  prompt_len + N.
  key_mask: the prompt's mask, padded with False over the completion (written positions are known
  from `step`).
  """

  caches: tuple
  key_mask: jax.Array  # [B, S] bool
  tokens: jax.Array  # [B, N] int32
  logprobs: jax.Array  # [B, N] float32
  valid: jax.Array  # [B, N] bool
  done: jax.Array  # [B] bool
  positions: jax.Array  # [B] int32: position of the token fed in the next step
  step: jax.Array  # [] int32: index of the token the next step samples
  stop: jax.Array  # [] int32: the loop pauses before sampling token `stop` (N: runs to the end)
  row_keys: jax.Array  # [B] PRNG keys: row r's token at step t is drawn with fold_in(row_keys[r], t)
  row_ids: jax.Array  # [B] int32: the output row each row fills (the batch size for a filler row)
  nonfinite: jax.Array  # [] bool: some live row sampled from non-finite logits


def cache_blocks(prompt_len: int, max_new_tokens: int, first: int = 16) -> tuple[tuple[int, int], ...]:
  """(start, end) of the KV cache's blocks of positions: the prompt and the completion's first
  `first` positions, then blocks of `first`, 2 * first, 4 * first, ... (the last one cut at
  prompt_len + max_new_tokens).

  A decode step attends to the blocks up to the one it writes, so it reads at most about twice the
  positions written so far (plus `first`) instead of the whole cache; the blocks grow geometrically
  because every block read costs a fixed overhead on top of its bytes.
  """
  end = prompt_len + max_new_tokens
  bounds, size = [(0, min(prompt_len + first, end))], first
  while bounds[-1][1] < end:
    start = bounds[-1][1]
    bounds.append((start, min(start + size, end)))
    size *= 2
  return tuple(bounds)


def _constrain_cache(k_blocks, v_blocks, mesh: Mesh | None, rules: Rules) -> tuple:
  """One layer's (k blocks, v blocks) on their logical axes (`KV_CACHE_AXES`)."""
  return (
    tuple(constrain(x, KV_CACHE_AXES[0], mesh, rules) for x in k_blocks),
    tuple(constrain(x, KV_CACHE_AXES[1], mesh, rules) for x in v_blocks),
  )


def _head_logits(cfg: ModelConfig, w, h: jax.Array) -> jax.Array:
  """h [B, E] -> float32 logits [B, V]."""
  return jnp.einsum("be,ev->bv", h, head_matrix(cfg, w).astype(h.dtype), preferred_element_type=jnp.float32)


def _sample_rows(method: SamplingMethod, logits: jax.Array, row_keys: jax.Array, step: jax.Array):
  """logits [B, V] -> (tokens [B] int32, logprobs [B] float32).

  Row r draws with fold_in(row_keys[r], step): its randomness depends on the row's identity and the
  step alone, not on its position in the batch, so sharing a prefill or compacting the batch does
  not change any sample.
  """
  if not method.uses_key:  # no PRNG work for greedy
    return method.sample_rows(logits, None)
  return method.sample_rows(logits, jax.vmap(jax.random.fold_in, (0, None))(row_keys, step))


def _as_typed_key(key: jax.Array) -> jax.Array:
  """A typed PRNG key (raw uint32 [2] keys are wrapped)."""
  return key if jnp.issubdtype(key.dtype, jax.dtypes.prng_key) else jax.random.wrap_key_data(key)


@functools.partial(
  jax.jit, static_argnames=("cfg", "method", "max_new_tokens", "eos_id", "pad_id", "mesh", "rules", "num_samples")
)
def _prefill(
  cfg, method, max_new_tokens, eos_id, pad_id, mesh, rules, w, prompt_ids, prompt_mask, key, num_samples=1
) -> DecodeState:
  """Runs the P prompts once and repeats each prompt's cache and logits over its `num_samples` rows."""
  p_rows, p = prompt_ids.shape
  g = num_samples
  b = p_rows * g
  n = max_new_tokens
  s = p + n
  positions = default_positions(prompt_ids, prompt_mask)
  cos, sin = layers.rope_cos_sin(cfg, positions)
  mask = causal_mask(prompt_mask, p_rows, p)
  x = constrain(embed_tokens(cfg, w, prompt_ids), layers.ACTIVATION_AXES["residual"], mesh, rules)

  def rows(a):  # [P, ...] -> [P * G, ...], prompt-major
    return a if g == 1 else jnp.repeat(a, g, axis=0)

  caches = []
  blocks = cache_blocks(p, n)
  pad = blocks[0][1] - p  # the first block holds the prompt and the completion's first positions
  for lw in w["layers"]:
    x, (k, v), _ = layers.layer_forward(cfg, cast_weights(cfg, lw), x, cos, sin, mask, mesh, rules)
    kb = [jnp.pad(rows(jnp.transpose(k, (0, 2, 3, 1))), ((0, 0), (0, 0), (0, 0), (0, pad)))]
    vb = [jnp.pad(rows(jnp.transpose(v, (0, 2, 1, 3))), ((0, 0), (0, 0), (0, pad), (0, 0)))]
    for start, end in blocks[1:]:
      kb.append(jnp.zeros(kb[0].shape[:3] + (end - start,), kb[0].dtype))
      vb.append(jnp.zeros(vb[0].shape[:2] + (end - start,) + vb[0].shape[3:], vb[0].dtype))
    caches.append(_constrain_cache(kb, vb, mesh, rules))
  h = layers.rms_norm(x[:, -1], w["final_norm"].astype(x.dtype), cfg.rms_norm_eps)
  logits = _head_logits(cfg, w, h)
  row_ids = jnp.arange(b, dtype=jnp.int32)
  row_keys = jax.vmap(lambda r: jax.random.fold_in(_as_typed_key(key), r))(row_ids)
  token, logp = _sample_rows(method, rows(logits), row_keys, jnp.zeros((), jnp.int32))
  done = token == eos_id if eos_id is not None else jnp.zeros((b,), bool)
  tokens = jnp.full((b, n), pad_id, jnp.int32).at[:, 0].set(token)
  return DecodeState(
    caches=tuple(caches),
    key_mask=rows(jnp.pad(prompt_mask.astype(bool), ((0, 0), (0, s - p)))),
    tokens=tokens,
    logprobs=jnp.zeros((b, n), jnp.float32).at[:, 0].set(logp),
    valid=jnp.zeros((b, n), bool).at[:, 0].set(True),
    done=done,
    positions=rows(positions[:, -1] + 1),
    step=jnp.ones((), jnp.int32),
    stop=jnp.full((), n, jnp.int32),
    row_keys=row_keys,
    row_ids=row_ids,
    nonfinite=~jnp.all(jnp.isfinite(logits)),
  )


@functools.partial(
  jax.jit,
  static_argnames=("cfg", "method", "prompt_len", "eos_id", "pad_id"),
  donate_argnames=("state",),
)
def _decode(cfg, method, prompt_len, eos_id, pad_id, w, state: DecodeState) -> DecodeState:
  """Decodes until every row ended, token N - 1 was sampled or `state.stop` was reached: one
  `while_loop` per cache block of the completion (`cache_blocks`), each attending to the blocks up
  to its own; a loop whose positions were all written before runs no step."""
  n = state.tokens.shape[1]
  decode_layers = [layers.fuse_weights(cfg, cast_weights(cfg, lw)) for lw in w["layers"]]
  # The head as [V, E]: "be,ve->bv" ran faster than "be,ev->bv" for a small batch here.
  head_t = (w["embed"] if cfg.tie_word_embeddings else w["lm_head"].T).astype(cfg.jnp_dtype)
  final_norm = w["final_norm"].astype(cfg.jnp_dtype)
  zero = jnp.zeros((), jnp.int32)
  end = jnp.minimum(state.stop, n)

  def cond(st: DecodeState):
    return (st.step < end) & ~jnp.all(st.done)

  def body(st: DecodeState, block: int) -> DecodeState:
    step = st.step
    prev = jax.lax.dynamic_slice(st.tokens, (zero, step - 1), (st.tokens.shape[0], 1))  # [B,1]
    slot = prompt_len + step - 1
    start, stop = blocks[block]
    written = jnp.arange(prompt_len, stop) <= slot  # [stop - prompt_len]: the completion's positions so far
    key_mask = jnp.concatenate(
      [st.key_mask[:, :prompt_len], jnp.broadcast_to(written, (st.key_mask.shape[0], stop - prompt_len))], axis=1
    )
    cos, sin = layers.rope_cos_sin(cfg, st.positions[:, None])
    x = embed_tokens(cfg, w, prev)
    caches = []
    for lw, (kb, vb) in zip(decode_layers, st.caches):
      x, kb, vb = layers.layer_decode(cfg, lw, x, cos, sin, kb, vb, block, slot - start, key_mask)
      caches.append((kb, vb))
    h = layers.rms_norm(x[:, 0], final_norm, cfg.rms_norm_eps)
    logits = jnp.einsum("be,ve->bv", h, head_t, preferred_element_type=jnp.float32)
    token, logp = _sample_rows(method, logits, st.row_keys, step)
    token = jnp.where(st.done, pad_id, token)
    logp = jnp.where(st.done, 0.0, logp)
    at = (zero, step)
    done = st.done | (token == eos_id) if eos_id is not None else st.done
    return st.replace(
      caches=tuple(caches),
      tokens=jax.lax.dynamic_update_slice(st.tokens, token[:, None].astype(jnp.int32), at),
      logprobs=jax.lax.dynamic_update_slice(st.logprobs, logp[:, None], at),
      valid=jax.lax.dynamic_update_slice(st.valid, ~st.done[:, None], at),
      done=done,
      positions=st.positions + 1,
      step=step + 1,
      nonfinite=st.nonfinite | ~jnp.all(jnp.isfinite(logits) | st.done[:, None]),
    )

  blocks = cache_blocks(prompt_len, n)
  for block in range(len(blocks)):
    first_beyond = blocks[block][1] - prompt_len + 1  # the first step whose slot lies past this block

    def block_cond(st: DecodeState, first_beyond=first_beyond):
      return cond(st) & (st.step < first_beyond)

    state = jax.lax.while_loop(block_cond, functools.partial(body, block=block), state)
  return state


def prefill(
  *,
  cfg: ModelConfig,
  weights: Any,
  prompt_ids: jax.Array,
  prompt_mask: jax.Array,
  key: jax.Array,
  max_new_tokens: int,
  method: SamplingMethod,
  eos_id: int | None = None,
  pad_id: int = 0,
  num_samples: int = 1,
  mesh: Mesh | None = None,
  rules: Rules = DEFAULT_RULES,
) -> DecodeState:
  """Runs the prompts through the model once and samples each row's first token.

  Args:
    cfg, weights: the model (`Decoder.weights()` layout).
    prompt_ids [P, L] int32, prompt_mask [P, L] bool: left-padded prompts.
    key: PRNG key; row r draws its token t with fold_in(fold_in(key, r), t).
    max_new_tokens: N, the completion length the state has room for.
    method: Greedy or Categorical. eos_id: ends a row (None: never). pad_id: filler after the end.
    num_samples: G samples per prompt; the prompt's cache is computed once and shared by its rows.
    mesh, rules: shard the rows over the mesh's data axis.

  Returns:
    DecodeState of B = P * G rows, prompt-major (rows p * G ... p * G + G - 1 continue prompt p),
    with token 0 sampled; `decode` continues it.
  """
  if num_samples < 1:
    raise ValueError(f"num_samples must be >= 1, got {num_samples}")
  return _prefill(
    cfg, method, max_new_tokens, eos_id, pad_id, mesh, rules, weights, prompt_ids, prompt_mask, key, num_samples
  )


def decode(
  *,
  cfg: ModelConfig,
  weights: Any,
  state: DecodeState,
  method: SamplingMethod,
  eos_id: int | None = None,
  pad_id: int = 0,
) -> DecodeState:
  """Continues `state` (donated) until every row ended, N tokens were sampled or `state.stop`.

  Args:
    cfg, weights: the model. state: a `prefill` (or earlier `decode`) result of B rows.
    method, eos_id, pad_id: as given to `prefill`.

  Returns:
    The DecodeState after the last step: tokens / logprobs / valid [B, N], done [B], step [].
  """
  prompt_len = state.key_mask.shape[1] - state.tokens.shape[1]
  return _decode(cfg, method, prompt_len, eos_id, pad_id, weights, state)


def _bucket(live: int, floor: int) -> int:
  """The smallest power of two >= max(live, floor)."""
  return 1 << (max(int(live), int(floor), 1) - 1).bit_length()


def _state_rows(state: DecodeState, mesh: Mesh | None, rules: Rules) -> DecodeState:
  """Inside jit: `state`'s caches on their logical axes and its [B, ...] leaves sharded by rows."""
  if mesh is None:
    return state
  caches = tuple(_constrain_cache(kb, vb, mesh, rules) for kb, vb in state.caches)
  rest = {
    f: constrain_rows(getattr(state, f), mesh, rules)
    for f in ("key_mask", "tokens", "logprobs", "valid", "done", "positions", "row_keys", "row_ids")
  }
  return state.replace(caches=caches, **rest)


@functools.partial(jax.jit, static_argnames=("rows", "total", "mesh", "rules"))
def _compact(state: DecodeState, rows: int, total: int, mesh, rules) -> DecodeState:
  """The live rows of `state` gathered into a batch of `rows` (live ones first; filler rows are ended
  and fill output row `total`, i.e. nothing)."""
  order = jnp.argsort(state.done, stable=True)[:rows]
  live = jnp.sum(~state.done)
  take = functools.partial(jnp.take, indices=order, axis=0)
  small = jax.tree.map(take, state.replace(step=None, stop=None, nonfinite=None))
  filler = jnp.arange(rows) >= live
  small = small.replace(
    step=state.step,
    stop=state.stop,
    nonfinite=state.nonfinite,
    done=small.done | filler,
    row_ids=jnp.where(filler, total, small.row_ids),
  )
  return _state_rows(small, mesh, rules)


@functools.partial(jax.jit, donate_argnames=("out",))
def _flush(out: tuple, state: DecodeState) -> tuple:
  """Writes `state`'s rows into the outputs (tokens, logprobs, valid, done) [total, ...] by row id."""

  def put(dst, src):
    return dst.at[state.row_ids].set(src, mode="drop")

  tokens, logprobs, valid, done = out
  return (put(tokens, state.tokens), put(logprobs, state.logprobs), put(valid, state.valid), put(done, state.done))


def _decode_compacting(cfg, weights, state: DecodeState, *, method, eos_id, pad_id, compact_every, floor, mesh, rules):
  """`decode` in chunks of `compact_every` steps; after a chunk that leaves at most half of the rows
  live, the live rows move to the smallest power-of-two batch (>= floor) that holds them, so the cost
  of a step follows the rows still running. Reads the live count and the step once per chunk.

  Returns (tokens, logprobs, valid, done) [total, ...], the final state, rows x steps computed.
  """
  total = state.tokens.shape[0]
  out = (state.tokens, state.logprobs, state.valid, state.done)
  out = jax.tree.map(jnp.copy, out)
  n = state.tokens.shape[1]
  step, row_steps = int(state.step), 0
  while True:
    stop = min(step + compact_every, n)
    state = state.replace(stop=jnp.full((), stop, jnp.int32))
    state = decode(cfg=cfg, weights=weights, state=state, method=method, eos_id=eos_id, pad_id=pad_id)
    rows = state.tokens.shape[0]
    live, after = jax.device_get((jnp.sum(~state.done), state.step))
    row_steps += rows * (int(after) - step)
    step = int(after)
    if live == 0 or step >= n:
      break
    target = _bucket(live, floor)
    if target <= rows // 2:
      out = _flush(out, state)
      state = _compact(state, target, total, mesh, rules)
  return _flush(out, state), state, row_steps


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
  num_samples: int = 1,
  compact_every: int = 0,
  mesh: Mesh | None = None,
  rules: Rules = DEFAULT_RULES,
) -> SampleOutput:
  """Samples up to `max_new_tokens` tokens after each prompt, `num_samples` times.

  Args:
    model: the decoder.
    prompt_ids, prompt_mask: [P, L] left-padded prompts (every row has at least one real token
      and its last column is real).
    key: PRNG key. temperature (0: greedy), top_p, top_k: the sampling method, unless `method`
      (a Greedy or Categorical) is given.
    eos_id: a sequence ends after producing it (included in its mask); None: never ends early.
    pad_id: filler after the end (default: eos_id, else 0).
    num_samples: G completions per prompt, from one shared prefill of the prompt.
    compact_every: 0, or move the live rows to a smaller batch every this many steps once at most
      half of them run (see `generate_from_weights`).
    mesh, rules: shard the batch over the mesh's data axis (default: the model's mesh).

  Returns:
    SampleOutput with tokens, logprobs, mask [B, N], lengths and truncated [B], B = P * G
    (prompt-major: rows p * G ... p * G + G - 1 are prompt p's), N = max_new_tokens.
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
    num_samples=num_samples,
    compact_every=compact_every,
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
  num_samples: int = 1,
  compact_every: int = 0,
  mesh: Mesh | None = None,
  rules: Rules = DEFAULT_RULES,
  chunks: int = 1,
) -> SampleOutput:
  """`generate` on a weights pytree (`Decoder.weights()` layout) and arrays already on devices.

  For the trainer: prompt_ids / prompt_mask [P, L] (int32 / bool, left-padded) may be global
  arrays that span several processes; nothing here reads them back to the host unless
  `compact_every` > 0, which reads the live-row count (one scalar) every `compact_every` steps and
  runs a few batch sizes (powers of two), each compiled once. Samples depend neither on the shared
  prefill nor on compaction: row p * G + g of (prompts, num_samples=G) equals row p * G + g of
  (each prompt repeated G times, num_samples=1) for the same key.
  chunks C > 1: the prompts are sampled in C passes of P/C (prompts c, c+C, ...: every pass keeps the
  batch's row sharding, and a prompt's G samples stay in its pass), so the KV cache is that of
  P/C * G rows; each pass has its own key, so the samples differ from one pass's.
  """
  if compact_every < 0:
    raise ValueError(f"compact_every must be >= 0, got {compact_every}")
  if chunks > 1:
    if prompt_ids.shape[0] % chunks:
      raise ValueError(f"chunks={chunks} does not divide the {prompt_ids.shape[0]} prompts")
    keys = jax.random.split(key, chunks)
    passes = split_rows((prompt_ids, prompt_mask), chunks, mesh, rules)
    kw = dict(
      method=method, eos_id=eos_id, pad_id=pad_id, num_samples=num_samples, compact_every=compact_every, mesh=mesh
    )
    outs = [
      generate_from_weights(cfg, weights, i, m, keys[c], max_new_tokens, rules=rules, **kw)
      for c, (i, m) in enumerate(passes)
    ]
    return merge_rows(outs, num_samples, mesh, rules)
  state = prefill(
    cfg=cfg,
    weights=weights,
    prompt_ids=prompt_ids,
    prompt_mask=prompt_mask,
    key=key,
    max_new_tokens=max_new_tokens,
    method=method,
    eos_id=eos_id,
    pad_id=pad_id,
    num_samples=num_samples,
    mesh=mesh,
    rules=rules,
  )
  if compact_every == 0:
    state = decode(cfg=cfg, weights=weights, state=state, method=method, eos_id=eos_id, pad_id=pad_id)
    tokens, logprobs, valid, done = state.tokens, state.logprobs, state.valid, state.done
    row_steps = (state.step - 1) * tokens.shape[0]
  else:
    (tokens, logprobs, valid, done), state, row_steps = _decode_compacting(
      cfg,
      weights,
      state,
      method=method,
      eos_id=eos_id,
      pad_id=pad_id,
      compact_every=compact_every,
      floor=max(8, mesh.size if mesh is not None else 1),
      mesh=mesh,
      rules=rules,
    )
  return SampleOutput(
    tokens=tokens,
    logprobs=logprobs,
    mask=valid,
    lengths=jnp.sum(valid, axis=1, dtype=jnp.int32),
    truncated=~done,
    decode_steps=state.step - 1,
    nonfinite_logits=state.nonfinite,
    row_steps=jnp.asarray(row_steps, jnp.int32),
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


@functools.partial(jax.jit, static_argnames=("group", "mesh", "rules"))
def merge_rows(outs: list[SampleOutput], group: int, mesh: Mesh | None, rules: Rules) -> SampleOutput:
  """The inverse of `split_rows` on the passes' outputs, whose rows come in groups of `group` samples of
  one prompt (decode_steps: the longest pass; row_steps: their sum)."""

  def merge(*parts):
    x = jnp.stack([p.reshape(-1, group, *p.shape[1:]) for p in parts], axis=1)  # [P/C, C, G, ...]
    return constrain(x.reshape(-1, *x.shape[3:]), ("batch",) + (None,) * (x.ndim - 3), mesh, rules)

  rows = ("tokens", "logprobs", "mask", "lengths", "truncated")
  merged = {k: merge(*(getattr(o, k) for o in outs)) for k in rows}
  return SampleOutput(
    **merged,
    decode_steps=jnp.max(jnp.stack([o.decode_steps for o in outs])),
    nonfinite_logits=jnp.any(jnp.stack([o.nonfinite_logits for o in outs])),
    row_steps=jnp.sum(jnp.stack([o.row_steps for o in outs])),
  )


def check_finite(out: SampleOutput) -> None:
  """FloatingPointError when `out` was sampled from NaN or infinite logits (one scalar read)."""
  if bool(jax.device_get(out.nonfinite_logits)):
    raise FloatingPointError(
      "sampling: the policy's logits held NaN or infinite values, so the sampled token ids are garbage "
      "(the weights have diverged: lower optim.lr, or check the checkpoint the run started from)"
    )
