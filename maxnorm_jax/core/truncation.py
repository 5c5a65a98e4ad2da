"""The distribution a truncated sampler draws from: softmax(logits / temperature) restricted to the
`top_k` most likely tokens and to the smallest set whose probability reaches `top_p`, renormalised
over the kept tokens (docs/DESIGN.md §3.4).

The sampler draws from `log_probs` and the trainer's log-prob passes score tokens with
`token_log_probs`, so the PPO ratio and the KL compare the distribution that was sampled.
Shapes: logits [..., V] (any leading axes, V the vocabulary), tokens [...].
"""

from __future__ import annotations

import jax
import jax.numpy as jnp


def truncates(top_k: int, top_p: float, vocab_size: int | None = None) -> bool:
  """Whether (top_k, top_p) removes any token (top_k = 0 and top_p = 1 mean no limit)."""
  limits_k = top_k > 0 and (vocab_size is None or top_k < vocab_size)
  return limits_k or top_p < 1.0


def kept_tokens(x: jax.Array, top_k: int = 0, top_p: float = 1.0) -> jax.Array:
  """[..., V] bool: the tokens the truncation keeps, for temperature-scaled logits x [..., V].

  top_k first, then top_p on the top-k distribution: a token is kept when the probability mass of
  the tokens strictly more likely than it is below top_p (so at least one token is kept). Ties at
  the boundary are all kept.
  """
  x = jax.lax.stop_gradient(x)
  keep = jnp.ones(x.shape, bool)
  if 0 < top_k < x.shape[-1]:
    kth = jax.lax.top_k(x, top_k)[0][..., -1:]
    keep = x >= kth
  if top_p < 1.0:
    masked = jnp.where(keep, x, -jnp.inf)
    sorted_x = -jnp.sort(-masked, axis=-1)
    p = jax.nn.softmax(sorted_x, axis=-1)
    before = jnp.cumsum(p, axis=-1) - p  # probability mass strictly above each token
    count = jnp.sum(before < top_p, axis=-1, keepdims=True)  # >= 1
    threshold = jnp.take_along_axis(sorted_x, count - 1, axis=-1)
    keep = keep & (x >= threshold)
  return keep


def log_probs(
  logits: jax.Array,
  temperature: float = 1.0,
  top_k: int = 0,
  top_p: float = 1.0,
  always_keep: jax.Array | None = None,
) -> jax.Array:
  """Log-probabilities [..., V] of the truncated, renormalised distribution (-inf outside it).

  logits [..., V] (any float dtype; computed in float32). always_keep [...] int: a token added to
  the kept set of its row (the trainer's scored token; a no-op for a token drawn from this
  distribution).
  """
  x = logits.astype(jnp.float32) / temperature
  if not truncates(top_k, top_p, x.shape[-1]):
    return jax.nn.log_softmax(x, axis=-1)
  keep = kept_tokens(x, top_k, top_p)
  if always_keep is not None:
    iota = jax.lax.broadcasted_iota(jnp.int32, x.shape, x.ndim - 1)
    keep = keep | (iota == always_keep[..., None])
  return jax.nn.log_softmax(jnp.where(keep, x, -jnp.inf), axis=-1)


def token_log_probs(
  logits: jax.Array, tokens: jax.Array, temperature: float = 1.0, top_k: int = 0, top_p: float = 1.0
) -> tuple[jax.Array, jax.Array]:
  """(log p(token), entropy) [...] under the truncated, renormalised, temperature-scaled
  distribution of logits [..., V]; tokens [...] int.

  The scored token always belongs to the kept set: under the policy that sampled it this changes
  nothing, and under a policy that moved since (the PPO update) its log-prob stays finite instead of
  -inf. Differentiable in the logits (the kept set is a constant).
  """
  lp = log_probs(logits, temperature, top_k, top_p, always_keep=tokens)
  logp = jnp.take_along_axis(lp, tokens[..., None], axis=-1)[..., 0]
  kept = jnp.isfinite(lp)
  safe = jnp.where(kept, lp, 0.0)
  entropy = -jnp.sum(jnp.where(kept, jnp.exp(safe) * safe, 0.0), axis=-1)
  return logp, entropy
