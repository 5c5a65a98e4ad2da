"""Pure functions of the decoder's layers (RMSNorm, RoPE, GQA attention, SwiGLU, MoE).

A layer's weights are a dict of arrays in these layouts (E embed, H heads, K kv_heads,
D head_dim, F mlp, X experts):

  attn_norm [E]      q [E,H,D]   k, v [E,K,D]   o [H,D,E]
  q_bias [H,D]       k_bias, v_bias [K,D]       o_bias [E]      q_norm, k_norm [D]
  mlp_norm [E]       gate, up [E,F]   down [F,E]
  router [E,X]       expert_gate, expert_up [X,E,F]   expert_down [X,F,E]

and optionally the fused forms `qkv` [E,(H+2K)*D] (+ `qkv_bias`), `gate_up` [E,2F] and
`o_flat` [H*D,E], which replace the separate projections when present (one plain 2-D matmul
instead of three / two, and no per-step relayout of the output projection).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from jax.sharding import Mesh

from maxnorm_jax.models.config import ModelConfig
from maxnorm_jax.parallel.rules import Rules
from maxnorm_jax.parallel.sharding import constrain

Weights = dict[str, jax.Array]

# Compute dtypes whose matmuls `dense` accumulates in float32 (`_matmul_f32_accumulate`).
SIXTEEN_BIT_FLOATS = (jnp.bfloat16, jnp.float16)

# Logical axes of the activations a layer pins when it is given a mesh (docs/DESIGN.md §5). Left to
# itself, the compiler followed the FSDP-sharded weights and sharded [B,T,E] activations on E with
# every row on every chip, holding whole [B,T,F] MLP hiddens (Qwen2.5-3B's update: 16 rows x 9,216
# x 11,008 a chip, PLAN.md); pinned, rows stay on their chips and the weights are gathered.
ACTIVATION_AXES = {
  "residual": ("batch", None, None),  # x [B,T,E]
  "heads": ("batch", None, "heads", None),  # q [B,T,H,D]
  "kv_heads": ("batch", None, "kv_heads", None),  # k, v [B,T,K,D]
  "mlp_hidden": ("batch", None, "mlp"),  # silu(gate) * up [B,T,F]
}


def dense(x: jax.Array, w: jax.Array, preferred_element_type=None) -> jax.Array:
  """x [..., K] times w [K, *O] -> [..., *O], as one 2-D matmul [M, K] x [K, prod(O)].

  XLA:CPU gives the weight gradient of a matmul over a 3-D activation (a contraction over both
  B and T) transposed copies of the activation and its gradient (a quarter of the update's time at
  issue 11's shape, BENCHMARKS.md); the flat matmul's gradient needs none. The reshapes are free.
  16-bit inputs go through `_matmul_f32_accumulate` (same result dtype as a plain jnp.dot).
  """
  k = x.shape[-1]
  x2, w2 = x.reshape(-1, k), w.reshape(k, -1)
  if preferred_element_type is None and x.dtype == w.dtype and x.dtype in SIXTEEN_BIT_FLOATS:
    y = _matmul_f32_accumulate(x2, w2)
  else:
    y = jnp.dot(x2, w2, preferred_element_type=preferred_element_type)
  return y.reshape(x.shape[:-1] + w.shape[1:])


@jax.custom_vjp
def _matmul_f32_accumulate(x: jax.Array, w: jax.Array) -> jax.Array:
  """x [M, K] times w [K, N] -> [M, N] in x's 16-bit dtype, accumulated in float32.

  XLA:CPU's fast bfloat16 matmuls (AMX through YNNPACK, about 1 TFLOP/s on the Intel machine of
  BENCHMARKS.md against 0.2-0.3 at float32) take bfloat16 operands with a float32 result; a
  bfloat16 result, or jax's own gradient (a float32 cotangent against a bfloat16 operand), falls
  back to float32 Eigen at 0.1-0.2. The gradient here keeps both operands of each matmul 16-bit.
  On TPU the result is the same matmul either way.
  """
  return jnp.dot(x, w, preferred_element_type=jnp.float32).astype(x.dtype)


def _matmul_f32_accumulate_fwd(x, w):
  return _matmul_f32_accumulate(x, w), (x, w)


def _matmul_f32_accumulate_bwd(res, g):
  x, w = res
  on_cpu = jax.default_backend() == "cpu"
  wt = _row_major_transpose(w) if on_cpu else w.T  # [N, K]
  xt = _row_major_transpose(x) if on_cpu and x.shape[1] <= w.shape[1] else x.T  # [K, M]
  dx = jnp.dot(g, wt, preferred_element_type=jnp.float32).astype(x.dtype)  # [M, K]
  dw = jnp.dot(xt, g, preferred_element_type=jnp.float32).astype(w.dtype)  # [K, N]
  return dx, dw


def _row_major_transpose(a: jax.Array) -> jax.Array:
  """a [..., R, C] -> [..., C, R] (its last two axes swapped), materialised row-major (XLA:CPU only;
  BENCHMARKS.md, bfloat16).

  XLA:CPU turns a lone transpose into a column-major layout of its operand, and YNNPACK takes only
  row-major dot operands: the dot is then upcast to a float32 Eigen matmul (0.1-0.3 TFLOP/s against
  1.1-1.4). Two transposed halves concatenated get a row-major buffer of their own. The halves are
  split by the last axis: the leading axes carry the rows, sharded over the data axes, and halves
  split by rows would move rows between devices (all-to-all and collective-permute in every
  backward; the update with the rows over 2 CPU devices went from 3.15 to 2.77 s, BENCHMARKS.md).
  Used in the backward of `dense` for every weight (small) and for the activation of a weight
  gradient when K <= N (for K > N the copy of the activation cost more than it saved), and in the
  attention's batched dots [N, R, C], N the rows x kv heads (672 -> 416 Eigen dots per update with
  the rows over 2 CPU devices, update 2.77 -> 2.69 s).
  """
  if a.shape[-1] < 2:
    return jnp.swapaxes(a, -1, -2)
  h = a.shape[-1] // 2
  return jnp.concatenate([jnp.swapaxes(a[..., :h], -1, -2), jnp.swapaxes(a[..., h:], -1, -2)], axis=-2)


_matmul_f32_accumulate.defvjp(_matmul_f32_accumulate_fwd, _matmul_f32_accumulate_bwd)


def rms_norm(x: jax.Array, weight: jax.Array, eps: float) -> jax.Array:
  """RMSNorm over the last axis, statistics in float32; returns x's dtype. x [..., N], weight [N]."""
  xf = x.astype(jnp.float32)
  y = xf * jax.lax.rsqrt(jnp.mean(xf * xf, axis=-1, keepdims=True) + eps)
  # weight * y.astype(x.dtype) rounded once to x's dtype, with the product taken in float32: the
  # product of two 16-bit floats is exact there, so the value is the same, and the weight's
  # gradient becomes a float32 sum over [B, T], which XLA:CPU runs as one fused reduction where a
  # 16-bit sum is split into a slow reduce-window tree (about 15x slower at [128, 70, 256]).
  return (weight.astype(jnp.float32) * y.astype(x.dtype).astype(jnp.float32)).astype(x.dtype)


def rope_cos_sin(cfg: ModelConfig, positions: jax.Array) -> tuple[jax.Array, jax.Array]:
  """cos, sin [B, T, D] (float32) of rotary embeddings at integer `positions` [B, T]."""
  d = cfg.head_dim
  inv_freq = 1.0 / (cfg.rope_theta ** (jnp.arange(0, d, 2, dtype=jnp.float32) / d))
  if cfg.rope_scaling_factor is not None:
    inv_freq = inv_freq / cfg.rope_scaling_factor
  freqs = positions.astype(jnp.float32)[..., None] * inv_freq  # [B, T, D/2]
  emb = jnp.concatenate([freqs, freqs], axis=-1)
  return jnp.cos(emb), jnp.sin(emb)


def _rotate(x: jax.Array, cos: jax.Array, sin: jax.Array) -> jax.Array:
  cos = cos[:, :, None, :].astype(x.dtype)
  sin = sin[:, :, None, :].astype(x.dtype)
  half = x.shape[-1] // 2
  rotated = jnp.concatenate([-x[..., half:], x[..., :half]], axis=-1)
  return x * cos + rotated * sin


@jax.custom_vjp
def apply_rope(x: jax.Array, cos: jax.Array, sin: jax.Array) -> jax.Array:
  """Rotates x [B, T, N, D] by cos, sin [B, T, D] (the rotate-half convention of HF Qwen).

  The gradient is the rotation by the opposite angle (cos, -sin: the two halves of sin are equal),
  one elementwise pass like the forward's, where the transpose JAX derives is a chain of slices,
  pads and sums; cos and sin, functions of integer positions, get no gradient."""
  return _rotate(x, cos, sin)


def _apply_rope_fwd(x, cos, sin):
  return _rotate(x, cos, sin), (cos, sin)


def _apply_rope_bwd(res, g):
  cos, sin = res
  return _rotate(g, cos, -sin), None, None


apply_rope.defvjp(_apply_rope_fwd, _apply_rope_bwd)


def fuse_weights(cfg: ModelConfig, w: Weights) -> Weights:
  """Replaces q/k/v by one `qkv` [E,(H+2K)*D] matrix, gate/up by one `gate_up` [E,2F] and o by
  `o_flat` [H*D,E]."""
  w = dict(w)
  e = cfg.hidden_size
  w["o_flat"] = w.pop("o").reshape(-1, e)
  w["qkv"] = jnp.concatenate([w.pop("q").reshape(e, -1), w.pop("k").reshape(e, -1), w.pop("v").reshape(e, -1)], axis=1)
  if cfg.qkv_bias:
    w["qkv_bias"] = jnp.concatenate(
      [w.pop("q_bias").reshape(-1), w.pop("k_bias").reshape(-1), w.pop("v_bias").reshape(-1)]
    )
  if "gate" in w:
    w["gate_up"] = jnp.concatenate([w.pop("gate"), w.pop("up")], axis=1)
  return w


def project_qkv(
  cfg: ModelConfig, w: Weights, x: jax.Array, cos: jax.Array, sin: jax.Array
) -> tuple[jax.Array, jax.Array, jax.Array]:
  """q [B,T,H,D], k, v [B,T,K,D] of the normed input x [B,T,E], with q/k norm and RoPE."""
  b, t, _ = x.shape
  h, kh, d = cfg.num_heads, cfg.num_kv_heads, cfg.head_dim
  if "qkv" in w:
    y = dense(x, w["qkv"])
    if cfg.qkv_bias:
      y = y + w["qkv_bias"]
    q = y[..., : h * d].reshape(b, t, h, d)
    k = y[..., h * d : (h + kh) * d].reshape(b, t, kh, d)
    v = y[..., (h + kh) * d :].reshape(b, t, kh, d)
  else:
    q, k, v = dense(x, w["q"]), dense(x, w["k"]), dense(x, w["v"])
    if cfg.qkv_bias:
      q, k, v = q + w["q_bias"], k + w["k_bias"], v + w["v_bias"]
  if cfg.qk_norm:
    q = rms_norm(q, w["q_norm"], cfg.rms_norm_eps)
    k = rms_norm(k, w["k_norm"], cfg.rms_norm_eps)
  return apply_rope(q, cos, sin), apply_rope(k, cos, sin), v


def _masked_softmax(cfg: ModelConfig, scores: jax.Array, mask: jax.Array) -> jax.Array:
  dtype = jnp.float32 if cfg.softmax_fp32 else scores.dtype
  scores = scores.astype(dtype)
  scores = jnp.where(mask, scores, jnp.finfo(dtype).min)
  return jax.nn.softmax(scores, axis=-1)


def attend(cfg: ModelConfig, q: jax.Array, k: jax.Array, v: jax.Array, mask: jax.Array) -> jax.Array:
  """Grouped-query attention over a whole sequence.

  q [B,T,H,D], k, v [B,S,K,D], mask [B,T,S] (True: query t may see key s) -> [B,T,H,D].
  With `cfg.attention_chunk` = C > 0 and T > C, the queries go through in blocks of C in a
  rematerialised scan, so the scores [B,H,C,S] of one block are the largest buffer (forward and
  backward) instead of [B,H,T,S]; each query's softmax still sees every key, so the result is
  the same.
  """
  chunk = cfg.attention_chunk
  t = q.shape[1]
  if not chunk or t <= chunk:
    return _attend_block(cfg, q, k, v, mask)
  n = -(-t // chunk)
  pad = n * chunk - t
  qb = jnp.pad(q, ((0, 0), (0, pad), (0, 0), (0, 0))).reshape((q.shape[0], n, chunk) + q.shape[2:]).swapaxes(0, 1)
  mb = jnp.pad(mask, ((0, 0), (0, pad), (0, 0))).reshape(mask.shape[0], n, chunk, mask.shape[2]).swapaxes(0, 1)
  block = jax.checkpoint(lambda qc, mc: _attend_block(cfg, qc, k, v, mc))
  out = jax.lax.map(lambda xs: block(*xs), (qb, mb))  # [n, B, C, H, D]
  return out.swapaxes(0, 1).reshape((q.shape[0], n * chunk) + q.shape[2:])[:, :t]


def _attend_block(cfg: ModelConfig, q: jax.Array, k: jax.Array, v: jax.Array, mask: jax.Array) -> jax.Array:
  if q.dtype in SIXTEEN_BIT_FLOATS and q.dtype == k.dtype == v.dtype:
    return _attend_block_16bit(cfg, q, k, v, mask)
  b, t, h, d = q.shape
  kh = k.shape[2]
  qg = q.reshape(b, t, kh, h // kh, d)
  scores = jnp.einsum("btkgd,bskd->bkgts", qg, k) * (d**-0.5)
  p = _masked_softmax(cfg, scores, mask[:, None, None, :, :]).astype(v.dtype)
  out = jnp.einsum("bkgts,bskd->btkgd", p, v)
  return out.reshape(b, t, h, d)


def _attend_block_16bit(cfg: ModelConfig, q: jax.Array, k: jax.Array, v: jax.Array, mask: jax.Array) -> jax.Array:
  """`_attend_block` for 16-bit q, k, v: both dots batched over (row, kv head), [G*T, D] x [D, S]
  and [G*T, S] x [S, D], accumulated in float32, the layout of XLA:CPU's YNNPACK bf16 kernels
  (the einsums above are upcast to float32 dots there; one 128-row minibatch's attention on the
  AMD machine of BENCHMARKS.md: forward 19.8 -> 8.5 ms, grad 49.3 -> 36.1). Same math."""
  b, t, h, d = q.shape
  s, kh = k.shape[1], k.shape[2]
  g = h // kh
  qb = q.reshape(b, t, kh, g, d).transpose(0, 2, 3, 1, 4).reshape(b * kh, g * t, d)
  kb = k.transpose(0, 2, 3, 1).reshape(b * kh, d, s)
  vb = v.transpose(0, 2, 1, 3).reshape(b * kh, s, d)
  scores = _batched_matmul_f32_accumulate(qb, kb).reshape(b, kh, g, t, s) * (d**-0.5)
  p = _masked_softmax(cfg, scores, mask[:, None, None, :, :]).astype(v.dtype)
  out = _batched_matmul_f32_accumulate(p.reshape(b * kh, g * t, s), vb).reshape(b, kh, g, t, d)
  return out.transpose(0, 3, 1, 2, 4).reshape(b, t, h, d)


@jax.custom_vjp
def _batched_matmul_f32_accumulate(a: jax.Array, b: jax.Array) -> jax.Array:
  """a [N, M, K] times b [N, K, J] -> [N, M, J] in a's 16-bit dtype, accumulated in float32; the
  gradient's dots keep both operands 16-bit (as `_matmul_f32_accumulate`)."""
  return jnp.einsum("nmk,nkj->nmj", a, b, preferred_element_type=jnp.float32).astype(a.dtype)


def _batched_matmul_f32_accumulate_fwd(a, b):
  return _batched_matmul_f32_accumulate(a, b), (a, b)


def _batched_matmul_f32_accumulate_bwd(res, g):
  a, b = res
  on_cpu = jax.default_backend() == "cpu"
  swap = _row_major_transpose if on_cpu else (lambda x: jnp.swapaxes(x, 1, 2))
  bt, at = swap(b), swap(a)  # [N, J, K], [N, K, M]
  da = jnp.einsum("nmj,njk->nmk", g, bt, preferred_element_type=jnp.float32).astype(a.dtype)
  db = jnp.einsum("nkm,nmj->nkj", at, g, preferred_element_type=jnp.float32).astype(b.dtype)
  return da, db


_batched_matmul_f32_accumulate.defvjp(_batched_matmul_f32_accumulate_fwd, _batched_matmul_f32_accumulate_bwd)


def attend_cached(cfg: ModelConfig, q: jax.Array, k_blocks: tuple, v_blocks: tuple, key_mask: jax.Array) -> jax.Array:
  """One decode step of GQA against a cache held in blocks of positions.

  q [B,H,D]; k_blocks: [B,K,D,S_i] each (keys laid out so q.K is a plain batched matmul);
  v_blocks: [B,K,S_i,D] each; key_mask [B, sum S_i] -> [B,H,D]. Only the blocks given are read, so a
  step that passes the blocks written so far reads no cache beyond them.
  """
  b, h, d = q.shape
  kh = k_blocks[0].shape[1]
  qg = q.reshape(b, kh, h // kh, d)
  # 16-bit: float32 results, the form XLA:CPU hands to YNNPACK's bf16 kernels (else upcast dots).
  acc = jnp.float32 if q.dtype in SIXTEEN_BIT_FLOATS else None
  scores = [jnp.einsum("bkgd,bkds->bkgs", qg, k, preferred_element_type=acc) for k in k_blocks]
  scores = (scores[0] if len(scores) == 1 else jnp.concatenate(scores, axis=-1)) * (d**-0.5)
  p = _masked_softmax(cfg, scores, key_mask[:, None, None, :]).astype(v_blocks[0].dtype)
  out, start = None, 0
  for v in v_blocks:
    part = jnp.einsum("bkgs,bksd->bkgd", p[..., start : start + v.shape[2]], v, preferred_element_type=acc)
    out, start = part if out is None else out + part, start + v.shape[2]
  return out.reshape(b, h, d).astype(q.dtype)


def output_projection(cfg: ModelConfig, w: Weights, attn: jax.Array) -> jax.Array:
  """attn [B,T,H,D] -> [B,T,E]."""
  b, t, h, d = attn.shape
  y = dense(attn.reshape(b, t, h * d), w["o_flat"] if "o_flat" in w else w["o"].reshape(h * d, -1))
  return y + w["o_bias"] if cfg.o_bias else y


def swiglu(cfg: ModelConfig, w: Weights, x: jax.Array, mesh: Mesh | None = None, rules: Rules = ()) -> jax.Array:
  """Dense SwiGLU MLP: x [B,T,E] -> [B,T,E]; with a mesh, the hidden [B,T,F] is pinned to rows
  over the batch axes and F over the "mlp" axis."""
  if "gate_up" in w:
    gu = dense(x, w["gate_up"])
    f = gu.shape[-1] // 2
    g, u = gu[..., :f], gu[..., f:]
  else:
    g, u = dense(x, w["gate"]), dense(x, w["up"])
  return dense(constrain(jax.nn.silu(g) * u, ACTIVATION_AXES["mlp_hidden"], mesh, rules), w["down"])


def router_probs(cfg: ModelConfig, router_logits: jax.Array) -> tuple[jax.Array, jax.Array, jax.Array]:
  """Softmax probabilities [..., X] (float32), top-k weights [..., k] and expert ids [..., k].

  The top-k weights are renormalised to sum to 1 when `cfg.norm_topk_prob`.
  """
  probs = jax.nn.softmax(router_logits.astype(jnp.float32), axis=-1)
  top_w, top_i = jax.lax.top_k(probs, cfg.num_experts_per_tok)
  if cfg.norm_topk_prob:
    top_w = top_w / jnp.sum(top_w, axis=-1, keepdims=True)
  return probs, top_w, top_i


def moe(cfg: ModelConfig, w: Weights, x: jax.Array) -> tuple[jax.Array, jax.Array]:
  """Top-k mixture of SwiGLU experts, no token dropping.

  Every expert runs as one batched matmul over the `expert` axis, and each token's output is
  the top-k weighted sum (weights of unselected experts are 0). x [B,T,E] ->
  (y [B,T,E], router_logits [B,T,X]).
  """
  router_logits = dense(x, w["router"])
  _, top_w, top_i = router_probs(cfg, router_logits)
  combine = jnp.sum(jax.nn.one_hot(top_i, cfg.num_experts, dtype=jnp.float32) * top_w[..., None], axis=-2).astype(
    x.dtype
  )  # [B,T,X]
  g = jnp.einsum("bte,xef->btxf", x, w["expert_gate"])
  u = jnp.einsum("bte,xef->btxf", x, w["expert_up"])
  h = jax.nn.silu(g) * u * combine[..., None]
  return jnp.einsum("btxf,xfe->bte", h, w["expert_down"]), router_logits


def feed_forward(
  cfg: ModelConfig, w: Weights, x: jax.Array, mesh: Mesh | None = None, rules: Rules = ()
) -> tuple[jax.Array, jax.Array | None]:
  """The layer's MLP (dense or MoE): x [B,T,E] -> (y [B,T,E], router logits [B,T,X] or None)."""
  if "router" in w:
    return moe(cfg, w, x)
  return swiglu(cfg, w, x, mesh, rules), None


def layer_forward(
  cfg: ModelConfig,
  w: Weights,
  x: jax.Array,
  cos: jax.Array,
  sin: jax.Array,
  mask: jax.Array,
  mesh: Mesh | None = None,
  rules: Rules = (),
) -> tuple[jax.Array, tuple[jax.Array, jax.Array], jax.Array | None]:
  """One pre-norm decoder layer over a whole sequence.

  x [B,T,E], cos/sin [B,T,D], mask [B,T,T] -> (x [B,T,E], (k, v) [B,T,K,D], router logits).
  With a `mesh`, the activations are pinned to `ACTIVATION_AXES` under `rules`.
  """
  hn = rms_norm(x, w["attn_norm"], cfg.rms_norm_eps)
  q, k, v = project_qkv(cfg, w, hn, cos, sin)
  q = constrain(q, ACTIVATION_AXES["heads"], mesh, rules)
  k, v = (constrain(a, ACTIVATION_AXES["kv_heads"], mesh, rules) for a in (k, v))
  x = constrain(x + output_projection(cfg, w, attend(cfg, q, k, v, mask)), ACTIVATION_AXES["residual"], mesh, rules)
  y, router_logits = feed_forward(cfg, w, rms_norm(x, w["mlp_norm"], cfg.rms_norm_eps), mesh, rules)
  return constrain(x + y, ACTIVATION_AXES["residual"], mesh, rules), (k, v), router_logits


def write_cache(cache: jax.Array, update: jax.Array, at: tuple) -> jax.Array:
  """`lax.dynamic_update_slice(cache, update.astype(cache.dtype), at)`, for a 16-bit float cache
  done on its bits (uint16): XLA:CPU computes a 16-bit float update-slice in float32, converting the
  whole cache there and back every decode step (a loop over every element instead of a write of the
  new ones); on integers it leaves the update-slice alone. Same values, bit for bit."""
  update = update.astype(cache.dtype)
  if cache.dtype not in SIXTEEN_BIT_FLOATS:
    return jax.lax.dynamic_update_slice(cache, update, at)
  bits = jax.lax.bitcast_convert_type
  out = jax.lax.dynamic_update_slice(bits(cache, jnp.uint16), bits(update, jnp.uint16), at)
  return bits(out, cache.dtype)


def layer_decode(
  cfg: ModelConfig,
  w: Weights,
  x: jax.Array,
  cos: jax.Array,
  sin: jax.Array,
  k_blocks: tuple,
  v_blocks: tuple,
  block: int,
  offset: jax.Array,
  key_mask: jax.Array,
) -> tuple[jax.Array, tuple, tuple]:
  """One decoder layer for one new token per sequence, writing its key/value at position `offset`
  of cache block `block` and attending to blocks 0..block.

  x [B,1,E], cos/sin [B,1,D], k_blocks [B,K,D,S_i], v_blocks [B,K,S_i,D] (the whole cache),
  key_mask [B, S_0 + ... + S_block] (True at the positions written, this step's included)
  -> (x [B,1,E], k_blocks, v_blocks).
  """
  hn = rms_norm(x, w["attn_norm"], cfg.rms_norm_eps)
  q, k, v = project_qkv(cfg, w, hn, cos, sin)
  zero = jnp.zeros((), jnp.int32)
  kb, vb = list(k_blocks), list(v_blocks)
  kb[block] = write_cache(kb[block], jnp.transpose(k, (0, 2, 3, 1)), (zero, zero, zero, offset))
  vb[block] = write_cache(vb[block], jnp.transpose(v, (0, 2, 1, 3)), (zero, zero, offset, zero))
  attn = attend_cached(cfg, q[:, 0], tuple(kb[: block + 1]), tuple(vb[: block + 1]), key_mask)
  x = x + output_projection(cfg, w, attn[:, None])
  y, _ = feed_forward(cfg, w, rms_norm(x, w["mlp_norm"], cfg.rms_norm_eps))
  return x + y, tuple(kb), tuple(vb)
