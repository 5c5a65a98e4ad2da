"""The decoder (Flax NNX): parameters with logical axis names and the forward pass."""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
from flax import nnx
from jax.sharding import Mesh

from maxnorm_jax.models import layers
from maxnorm_jax.models.config import ModelConfig
from maxnorm_jax.parallel.rules import Rules
from maxnorm_jax.parallel.sharding import constrain

DecoderWeights = dict[str, Any]  # {"embed", "layers": [Weights], "final_norm", "lm_head"?}


def _normal(std: float = 0.02):
  def init(key, shape, dtype):
    return (std * jax.random.normal(key, shape, jnp.float32)).astype(dtype)

  return init


def _ones(key, shape, dtype):
  del key
  return jnp.ones(shape, dtype)


def _zeros(key, shape, dtype):
  del key
  return jnp.zeros(shape, dtype)


def layer_param_specs(cfg: ModelConfig, layer: int) -> dict[str, tuple[tuple[int, ...], tuple[str, ...], Any]]:
  """name -> (shape, logical axes, initialiser) of decoder layer `layer`'s parameters."""
  e, h, k, d = cfg.hidden_size, cfg.num_heads, cfg.num_kv_heads, cfg.head_dim
  specs = {
    "attn_norm": ((e,), ("embed",), _ones),
    "q": ((e, h, d), ("embed", "heads", "head_dim"), _normal()),
    "k": ((e, k, d), ("embed", "kv_heads", "head_dim"), _normal()),
    "v": ((e, k, d), ("embed", "kv_heads", "head_dim"), _normal()),
    "o": ((h, d, e), ("heads", "head_dim", "embed"), _normal()),
    "mlp_norm": ((e,), ("embed",), _ones),
  }
  if cfg.qkv_bias:
    specs["q_bias"] = ((h, d), ("heads", "head_dim"), _zeros)
    specs["k_bias"] = ((k, d), ("kv_heads", "head_dim"), _zeros)
    specs["v_bias"] = ((k, d), ("kv_heads", "head_dim"), _zeros)
  if cfg.o_bias:
    specs["o_bias"] = ((e,), ("embed",), _zeros)
  if cfg.qk_norm:
    specs["q_norm"] = ((d,), ("head_dim",), _ones)
    specs["k_norm"] = ((d,), ("head_dim",), _ones)
  if cfg.is_moe_layer(layer):
    x, f = cfg.num_experts, cfg.moe_intermediate_size
    specs["router"] = ((e, x), ("embed", None), _normal())
    specs["expert_gate"] = ((x, e, f), ("expert", "embed", "mlp"), _normal())
    specs["expert_up"] = ((x, e, f), ("expert", "embed", "mlp"), _normal())
    specs["expert_down"] = ((x, f, e), ("expert", "mlp", "embed"), _normal())
  else:
    f = cfg.intermediate_size
    specs["gate"] = ((e, f), ("embed", "mlp"), _normal())
    specs["up"] = ((e, f), ("embed", "mlp"), _normal())
    specs["down"] = ((f, e), ("mlp", "embed"), _normal())
  return specs


class DecoderLayer(nnx.Module):
  """One pre-norm decoder layer's parameters (attributes named as in `layers`)."""

  def __init__(self, cfg: ModelConfig, layer: int, *, rngs: nnx.Rngs):
    self.names = tuple(layer_param_specs(cfg, layer))
    for name, (shape, axes, init) in layer_param_specs(cfg, layer).items():
      value = init(rngs.params(), shape, cfg.jnp_param_dtype)
      setattr(self, name, nnx.Param(value, logical_axes=axes))

  def weights(self) -> layers.Weights:
    """The parameter arrays by name."""
    return {name: getattr(self, name)[...] for name in self.names}


class Decoder(nnx.Module):
  """A Qwen2 / Qwen3 / Qwen3-MoE decoder-only language model.

  `model(input_ids)` with input_ids [B, T] int returns logits [B, T, V].
  """

  def __init__(self, cfg: ModelConfig, *, rngs: nnx.Rngs):
    self.config = cfg
    e, v = cfg.hidden_size, cfg.vocab_size
    pdt = cfg.jnp_param_dtype
    self.embed = nnx.Param(_normal()(rngs.params(), (v, e), pdt), logical_axes=("vocab", "embed"))
    self.layers = nnx.List([DecoderLayer(cfg, i, rngs=rngs) for i in range(cfg.num_layers)])
    self.final_norm = nnx.Param(jnp.ones((e,), pdt), logical_axes=("embed",))
    if not cfg.tie_word_embeddings:
      self.lm_head = nnx.Param(_normal()(rngs.params(), (e, v), pdt), logical_axes=("embed", "vocab"))

  def weights(self) -> DecoderWeights:
    """All parameter arrays as a plain pytree (the input of the pure functions below)."""
    w = {
      "embed": self.embed[...],
      "layers": [layer.weights() for layer in self.layers],
      "final_norm": self.final_norm[...],
    }
    if not self.config.tie_word_embeddings:
      w["lm_head"] = self.lm_head[...]
    return w

  def __call__(self, input_ids, attention_mask=None, positions=None) -> jax.Array:
    """Logits [B, T, V] of input_ids [B, T]; attention_mask [B, T] marks real tokens."""
    w = self.weights()
    h, _ = hidden_states(self.config, w, input_ids, attention_mask, positions)
    return logits_from_hidden(self.config, w, h)

  def forward_with_aux(self, input_ids, attention_mask=None, positions=None):
    """(logits [B, T, V], aux) with aux["load_balancing_loss"] (0 for dense models), a scalar
    equal to transformers' `aux_loss` (before `router_aux_loss_coef`)."""
    w = self.weights()
    h, router_logits = hidden_states(self.config, w, input_ids, attention_mask, positions)
    aux = {"load_balancing_loss": load_balancing_loss(self.config, router_logits, attention_mask)}
    return logits_from_hidden(self.config, w, h), aux


def default_positions(input_ids: jax.Array, attention_mask: jax.Array | None) -> jax.Array:
  """Positions [B, T]: 0.. over real tokens (left padding starts the count at the first real one)."""
  if attention_mask is None:
    return jnp.broadcast_to(jnp.arange(input_ids.shape[1], dtype=jnp.int32), input_ids.shape)
  return jnp.maximum(jnp.cumsum(attention_mask.astype(jnp.int32), axis=1) - 1, 0)


def causal_mask(attention_mask: jax.Array | None, batch: int, length: int) -> jax.Array:
  """[B, T, T] bool: query t sees key s <= t that is a real token."""
  causal = jnp.tril(jnp.ones((length, length), bool))[None]
  if attention_mask is None:
    return jnp.broadcast_to(causal, (batch, length, length))
  return causal & attention_mask.astype(bool)[:, None, :]


def embed_tokens(cfg: ModelConfig, w: DecoderWeights, input_ids: jax.Array) -> jax.Array:
  """[B, T] ids -> [B, T, E] embeddings in the compute dtype."""
  return jnp.take(w["embed"], input_ids, axis=0).astype(cfg.jnp_dtype)


def cast_weights(cfg: ModelConfig, w: Any) -> Any:
  """Casts floating weights to the compute dtype (no-op when they already have it)."""
  dt = cfg.jnp_dtype
  return jax.tree.map(lambda a: a.astype(dt) if jnp.issubdtype(a.dtype, jnp.floating) else a, w)


def hidden_states(
  cfg: ModelConfig,
  w: DecoderWeights,
  input_ids: jax.Array,
  attention_mask: jax.Array | None = None,
  positions: jax.Array | None = None,
  mesh: Mesh | None = None,
  rules: Rules = (),
) -> tuple[jax.Array, list[jax.Array]]:
  """Final-normed hidden states [B, T, E] and each MoE layer's router logits [B, T, X].

  With a `mesh`, the activations are pinned to rows over the batch axes of `rules`
  (`layers.ACTIVATION_AXES`)."""
  b, t = input_ids.shape
  if positions is None:
    positions = default_positions(input_ids, attention_mask)
  cos, sin = layers.rope_cos_sin(cfg, positions)
  mask = causal_mask(attention_mask, b, t)
  x = constrain(embed_tokens(cfg, w, input_ids), layers.ACTIVATION_AXES["residual"], mesh, rules)

  def run_layer(lw, x):
    y, _, router_logits = layers.layer_forward(cfg, cast_weights(cfg, lw), x, cos, sin, mask, mesh, rules)
    return y, router_logits

  if cfg.remat:
    run_layer = jax.checkpoint(run_layer)
  router = []
  if cfg.remat and _uniform(w["layers"]):
    stacked = jax.tree.map(lambda *a: jnp.stack(a), *w["layers"])
    x, router_logits = jax.lax.scan(lambda x, lw: run_layer(lw, x), x, stacked)
    router = [] if router_logits is None else list(router_logits)
  else:
    for lw in w["layers"]:
      x, router_logits = run_layer(lw, x)
      if router_logits is not None:
        router.append(router_logits)
  return layers.rms_norm(x, w["final_norm"].astype(x.dtype), cfg.rms_norm_eps), router


def _uniform(layer_weights: list) -> bool:
  first = jax.tree.structure(layer_weights[0]), [a.shape for a in jax.tree.leaves(layer_weights[0])]
  return all((jax.tree.structure(lw), [a.shape for a in jax.tree.leaves(lw)]) == first for lw in layer_weights)


def head_matrix(cfg: ModelConfig, w: DecoderWeights) -> jax.Array:
  """The output projection [E, V] (the transposed embedding when tied)."""
  return w["embed"].T if cfg.tie_word_embeddings else w["lm_head"]


def logits_from_hidden(cfg: ModelConfig, w: DecoderWeights, h: jax.Array) -> jax.Array:
  """h [..., E] -> logits [..., V] (float32 when `cfg.logits_fp32`)."""
  head = head_matrix(cfg, w).astype(h.dtype)
  out_dtype = jnp.float32 if cfg.logits_fp32 else h.dtype
  return layers.dense(h, head, preferred_element_type=out_dtype)


def load_balancing_loss(
  cfg: ModelConfig, router_logits: list[jax.Array], attention_mask: jax.Array | None = None
) -> jax.Array:
  """The Switch-Transformer load-balancing loss over all MoE layers, as transformers computes it.

  router_logits: per MoE layer [B, T, X]. Returns num_experts * sum_x f_x P_x, where f_x is the
  fraction of (token, top-k slot) assignments to expert x and P_x its mean router probability,
  both over the real tokens of all MoE layers. 0 for a dense model.
  """
  if not router_logits:
    return jnp.zeros((), jnp.float32)
  logits = jnp.stack(router_logits)  # [L, B, T, X]
  probs, _, top_i = layers.router_probs(cfg.replace(norm_topk_prob=False), logits)
  assigned = jax.nn.one_hot(top_i, cfg.num_experts, dtype=jnp.float32)  # [L, B, T, k, X]
  if attention_mask is None:
    m = jnp.ones(logits.shape[:3], jnp.float32)
  else:
    m = jnp.broadcast_to(attention_mask.astype(jnp.float32)[None], logits.shape[:3])
  tokens_per_expert = jnp.sum(assigned * m[..., None, None], axis=(0, 1, 2)) / jnp.sum(m)  # [k, X]
  prob_per_expert = jnp.sum(probs * m[..., None], axis=(0, 1, 2)) / jnp.sum(m)  # [X]
  return jnp.sum(tokens_per_expert * prob_per_expert[None]) * cfg.num_experts
