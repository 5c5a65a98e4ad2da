"""Sampling methods: frozen dataclasses that draw a token from logits [B, V].

`sample(logits, key)` returns (tokens [B] int32, logprobs [B] float32), where logprobs are the
log-probabilities of the tokens under the distribution they were actually drawn from.
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp

from maxnorm_jax.core import truncation


def first_argmax(x: jax.Array) -> jax.Array:
  """Index of the first maximum over the last axis (max, then the first index equal to it;
  cheaper than XLA's CPU argmax). x [..., V] -> [...] int32."""
  v = x.shape[-1]
  is_max = x == jnp.max(x, axis=-1, keepdims=True)
  iota = jax.lax.broadcasted_iota(jnp.int32, x.shape, x.ndim - 1)
  return jnp.min(jnp.where(is_max, iota, v), axis=-1)


@dataclasses.dataclass(frozen=True)
class Greedy:
  """The most likely token; its logprob is that of the model's (temperature 1) distribution."""

  uses_key = False

  def sample_rows(self, logits: jax.Array, keys: jax.Array | None) -> tuple[jax.Array, jax.Array]:
    """`sample` (per-row keys are not needed)."""
    return self.sample(logits, None)

  def sample(self, logits: jax.Array, key: jax.Array) -> tuple[jax.Array, jax.Array]:
    del key
    logits = logits.astype(jnp.float32)
    v = logits.shape[-1]
    top = jnp.max(logits, axis=-1, keepdims=True)  # shared by the argmax and the logsumexp
    iota = jax.lax.broadcasted_iota(jnp.int32, logits.shape, 1)
    tokens = jnp.min(jnp.where(logits == top, iota, v), axis=-1)
    log_z = top[:, 0] + jnp.log(jnp.sum(jnp.exp(logits - top), axis=-1))
    return tokens, top[:, 0] - log_z  # the chosen logit is the max


@dataclasses.dataclass(frozen=True)
class Categorical:
  """Ancestral sampling from softmax(logits / temperature), restricted to the `top_k` most likely
  tokens (0: no limit) and to the smallest set whose probability reaches `top_p` (1: no limit)."""

  temperature: float = 1.0
  top_p: float = 1.0
  top_k: int = 0
  uses_key = True

  def __post_init__(self):
    if self.temperature <= 0:
      raise ValueError(f"temperature must be > 0 for Categorical, got {self.temperature}")
    if not 0 < self.top_p <= 1:
      raise ValueError(f"top_p must be in (0, 1], got {self.top_p}")
    if self.top_k < 0:
      raise ValueError(f"top_k must be >= 0, got {self.top_k}")

  def log_probs(self, logits: jax.Array) -> jax.Array:
    """The log-probabilities [B, V] of the distribution tokens are drawn from (-inf outside): the
    trainer scores tokens with the same function (`maxnorm_jax.core.truncation`)."""
    return truncation.log_probs(logits, self.temperature, self.top_k, self.top_p)

  def sample(self, logits: jax.Array, key: jax.Array) -> tuple[jax.Array, jax.Array]:
    logp = self.log_probs(logits)
    tokens = jax.random.categorical(key, logp, axis=-1).astype(jnp.int32)
    return tokens, jnp.take_along_axis(logp, tokens[:, None], axis=-1)[:, 0]

  def sample_rows(self, logits: jax.Array, keys: jax.Array) -> tuple[jax.Array, jax.Array]:
    """logits [B, V], keys [B] (one PRNG key per row) -> (tokens [B] int32, logprobs [B] float32).

    Inverse-CDF sampling: one uniform per row (`sample`'s Gumbel-max draws V), so a row's token
    depends on its own key alone. The first token whose cumulative probability exceeds u * total;
    tokens of probability 0 are never drawn.
    """
    logp = self.log_probs(logits)
    u = jax.vmap(lambda k: jax.random.uniform(k, (), jnp.float32))(keys)
    cdf = jnp.cumsum(jnp.exp(logp), axis=-1)
    below = jnp.sum(cdf <= (u * cdf[:, -1])[:, None], axis=-1)
    last = logp.shape[-1] - 1 - first_argmax(jnp.flip(logp > -jnp.inf, axis=-1).astype(jnp.int32))
    tokens = jnp.minimum(below, last).astype(jnp.int32)  # u * total rounding up to the total
    return tokens, jnp.take_along_axis(logp, tokens[:, None], axis=-1)[:, 0]


SamplingMethod = Greedy | Categorical


def make_method(temperature: float = 1.0, top_p: float = 1.0, top_k: int = 0) -> SamplingMethod:
  """Greedy when temperature == 0, else Categorical(temperature, top_p, top_k)."""
  if temperature == 0:
    return Greedy()
  return Categorical(float(temperature), float(top_p), int(top_k))
