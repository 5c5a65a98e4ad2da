"""The log-prob pass for training: per-token log-probs and entropies, chunked over the sequence.

Logits are formed chunk by chunk inside a rematerialised scan, so the [B, T, V] logits are never
held at once (forward or backward): peak extra memory is [B, chunk, V].
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp

from maxnorm_jax.core import truncation
from maxnorm_jax.models.config import ModelConfig
from maxnorm_jax.models.decoder import Decoder, DecoderWeights, head_matrix, hidden_states, load_balancing_loss
from maxnorm_jax.models.layers import dense


class TokenLogProbs(NamedTuple):
  """logp [B, T]: log p(targets[t] | tokens <= t); entropy [B, T] of that distribution (nats).
  Both are 0 where the mask is False. load_balancing_loss: the MoE router's scalar
  load-balancing loss over the real input tokens (0 for dense models and from
  `logprobs_from_hidden`); scale it by `config.router_aux_loss_coef` to add it to a loss."""

  logp: jax.Array
  entropy: jax.Array
  load_balancing_loss: jax.Array | float = 0.0


def next_token_targets(input_ids: jax.Array, attention_mask: jax.Array | None = None) -> tuple[jax.Array, jax.Array]:
  """Targets [B, T] = input_ids shifted left by one, and their mask [B, T].

  Position t scores token t+1; the last position and positions whose target is padding are
  masked.
  """
  targets = jnp.concatenate([input_ids[:, 1:], jnp.zeros_like(input_ids[:, :1])], axis=1)
  valid = jnp.ones(input_ids.shape, bool) if attention_mask is None else attention_mask.astype(bool)
  mask = jnp.concatenate([valid[:, 1:] & valid[:, :-1], jnp.zeros_like(valid[:, :1])], axis=1)
  return targets, mask


def logprobs_from_hidden(
  cfg: ModelConfig,
  w: DecoderWeights,
  hidden: jax.Array,
  targets: jax.Array,
  mask: jax.Array | None = None,
  *,
  temperature: float = 1.0,
  chunk_size: int = 128,
  top_k: int = 0,
  top_p: float = 1.0,
) -> TokenLogProbs:
  """Log-probs and entropies of `targets` [B, T] under the head applied to hidden [B, T, E].

  top_k > 0 or top_p < 1: under the truncated, renormalised distribution a sampler with these
  settings draws from (`maxnorm_jax.core.truncation.token_log_probs`)."""
  b, t, e = hidden.shape
  chunk = min(chunk_size, t)
  n = -(-t // chunk)
  pad = n * chunk - t
  head = head_matrix(cfg, w).astype(hidden.dtype)
  h = jnp.pad(hidden, ((0, 0), (0, pad), (0, 0))).reshape(b, n, chunk, e).swapaxes(0, 1)
  tg = jnp.pad(targets, ((0, 0), (0, pad))).reshape(b, n, chunk).swapaxes(0, 1)

  @jax.checkpoint
  def one_chunk(h_c, t_c):
    logits = dense(h_c, head, preferred_element_type=jnp.float32)
    if truncation.truncates(top_k, top_p, logits.shape[-1]):
      return truncation.token_log_probs(logits, t_c, temperature, top_k, top_p)
    logits = logits / temperature
    logp_all = jax.nn.log_softmax(logits, axis=-1)
    logp = jnp.take_along_axis(logp_all, t_c[..., None], axis=-1)[..., 0]
    entropy = -jnp.sum(jnp.exp(logp_all) * logp_all, axis=-1)
    return logp, entropy

  def body(carry, xs):
    return carry, one_chunk(*xs)

  _, (logp, entropy) = jax.lax.scan(body, None, (h, tg))
  logp = logp.swapaxes(0, 1).reshape(b, n * chunk)[:, :t]
  entropy = entropy.swapaxes(0, 1).reshape(b, n * chunk)[:, :t]
  if mask is not None:
    logp = jnp.where(mask, logp, 0.0)
    entropy = jnp.where(mask, entropy, 0.0)
  return TokenLogProbs(logp, entropy)


def token_logprobs(
  model: Decoder,
  input_ids: jax.Array,
  targets: jax.Array,
  mask: jax.Array | None = None,
  *,
  attention_mask: jax.Array | None = None,
  positions: jax.Array | None = None,
  temperature: float = 1.0,
  chunk_size: int = 128,
) -> TokenLogProbs:
  """Per-token log-probs and entropies of `targets` [B, T] given `input_ids` [B, T].

  The logits at position t (which see input_ids[:, :t+1]) score targets[:, t]; use
  `next_token_targets` for the usual shift. mask [B, T] zeroes positions; attention_mask [B, T]
  marks real input tokens (left or right padding). Returns TokenLogProbs: logp, entropy [B, T]
  (float32) and the MoE load-balancing loss. Differentiable with respect to the parameters.
  """
  cfg = model.config
  w = model.weights()
  hidden, router_logits = hidden_states(cfg, w, input_ids, attention_mask, positions)
  out = logprobs_from_hidden(cfg, w, hidden, targets, mask, temperature=temperature, chunk_size=chunk_size)
  return out._replace(load_balancing_loss=load_balancing_loss(cfg, router_logits, attention_mask))
