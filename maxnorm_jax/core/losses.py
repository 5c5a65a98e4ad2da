"""Per-token policy losses, KL estimators and exact aggregation (docs/DESIGN.md §3.4).

Shapes: B sequences (a minibatch of the P*G completions, group-major), T tokens. Every loss here
is a quantity to minimise. Aggregation returns a (sum, denominator) pair: summing both over
microbatches or data-parallel shards and dividing once gives the exact global value.

The policy loss keeps two branches apart, as seed 000 requires:
  reward branch: stop_gradient(c) times the surrogate, c the card's advantages;
  KL branch:     beta * kl_weight * KL, never divided by the card's scale s_q.
"""

from typing import NamedTuple

import jax
import jax.numpy as jnp

from maxnorm_jax.core.cards import AdvantageCard

LOG_RATIO_CLAMP = 20.0
K3_CLAMP = 10.0
KL_KINDS = ("k1", "k2", "k3")
AGGREGATION_MODES = ("token-mean", "seq-mean-token-mean", "seq-mean-token-sum", "seq-mean-token-sum-norm")
SURROGATES = ("ppo", "cispo", "gspo")


def _log_ratio(logp, old_logp):
  return jnp.clip(logp - old_logp, -LOG_RATIO_CLAMP, LOG_RATIO_CLAMP)


def clipped_surrogate(
  logp,
  old_logp,
  adv_per_token,
  clip_low: float = 0.2,
  clip_high: float = 0.2,
  dual_clip: float | None = None,
) -> jax.Array:
  """[B, T] PPO clipped surrogate loss with clip-higher and an optional dual clip.

  ratio = exp(clamp(logp - old_logp, +-20)); loss = -min(ratio A, clip(ratio, 1-clip_low,
  1+clip_high) A). With `dual_clip=c` (> 1), the loss of tokens with A < 0 is capped at -A c.
  """
  ratio = jnp.exp(_log_ratio(logp, old_logp))
  adv = jnp.asarray(adv_per_token, ratio.dtype)
  unclipped = ratio * adv
  clipped = jnp.clip(ratio, 1.0 - clip_low, 1.0 + clip_high) * adv
  loss = -jnp.minimum(unclipped, clipped)
  if dual_clip is not None:
    if dual_clip <= 1.0:
      raise ValueError(f"dual_clip must be > 1, got {dual_clip}")
    loss = jnp.where(adv < 0, jnp.minimum(loss, -adv * dual_clip), loss)
  return loss


def cispo_surrogate(logp, old_logp, adv_per_token, clip_low: float = 1.0, clip_high: float = 0.28) -> jax.Array:
  """[B, T] CISPO: -stop_gradient(clip(ratio, 1-clip_low, 1+clip_high)) * A * logp.

  Every token keeps its gradient; only the importance weight is clipped (and frozen).
  """
  ratio = jnp.exp(_log_ratio(logp, old_logp))
  weight = jax.lax.stop_gradient(jnp.clip(ratio, 1.0 - clip_low, 1.0 + clip_high))
  return -weight * jnp.asarray(adv_per_token, ratio.dtype) * logp


def gspo_surrogate(logp, old_logp, adv_per_token, mask, clip_low: float = 3e-4, clip_high: float = 4e-4) -> jax.Array:
  """[B, T] GSPO: the clipped surrogate on the sequence ratio exp(mean_t log ratio).

  The token form s_t = sg(s) * pi_t / sg(pi_t) has the sequence ratio's value and the
  gradient s * grad log pi_t; aggregated with seq-mean-token-mean it is GSPO's objective.
  """
  mask = jnp.asarray(mask, logp.dtype)
  log_ratio = _log_ratio(logp, old_logp)
  seq_log_ratio = jnp.sum(log_ratio * mask, -1) / jnp.maximum(jnp.sum(mask, -1), 1.0)
  token_log_ratio = jax.lax.stop_gradient(seq_log_ratio)[:, None] + logp - jax.lax.stop_gradient(logp)
  return clipped_surrogate(token_log_ratio, jnp.zeros_like(logp), adv_per_token, clip_low, clip_high)


def kl_penalty(logp, ref_logp, kind: str = "k3") -> jax.Array:
  """[B, T] per-token KL estimate on delta = logp - ref_logp.

  k1 = delta; k2 = delta^2 / 2; k3 = exp(-delta) + delta - 1 (delta clamped to +-20 and the
  result to +-10, as the common trainers do).
  """
  delta = logp - ref_logp
  if kind == "k1":
    return delta
  if kind == "k2":
    return 0.5 * delta * delta
  if kind == "k3":
    delta = jnp.clip(delta, -LOG_RATIO_CLAMP, LOG_RATIO_CLAMP)
    return jnp.clip(jnp.exp(-delta) + delta - 1.0, -K3_CLAMP, K3_CLAMP)
  raise ValueError(f"unknown KL estimator {kind!r}; expected one of {KL_KINDS}")


def aggregate(per_token, mask, mode: str = "token-mean", max_len: int | None = None) -> tuple[jax.Array, jax.Array]:
  """Aggregates a [B, T] per-token quantity into (sum, denominator) scalars.

  token-mean:              sum_bt x m / sum_bt m
  seq-mean-token-mean:     sum_b (sum_t x m / n_b) / #seqs
  seq-mean-token-sum:      sum_b sum_t x m / #seqs
  seq-mean-token-sum-norm: sum_b sum_t x m / (max_len * #seqs)   (Dr.GRPO; max_len defaults to T)
  #seqs counts sequences with at least one valid token.
  """
  mask = jnp.asarray(mask, per_token.dtype)
  masked = per_token * mask
  tokens = jnp.sum(mask, axis=-1)
  seqs = jnp.sum(tokens > 0).astype(per_token.dtype)
  if mode == "token-mean":
    return jnp.sum(masked), jnp.sum(tokens)
  if mode == "seq-mean-token-mean":
    return jnp.sum(jnp.sum(masked, -1) / jnp.maximum(tokens, 1.0)), seqs
  if mode == "seq-mean-token-sum":
    return jnp.sum(masked), seqs
  if mode == "seq-mean-token-sum-norm":
    length = per_token.shape[-1] if max_len is None else max_len
    return jnp.sum(masked) / length, seqs
  raise ValueError(f"unknown aggregation mode {mode!r}; expected one of {AGGREGATION_MODES}")


class SequenceWeights(NamedTuple):
  """A card laid out per sequence, group-major: sequence b = q * G + i."""

  advantages: jax.Array  # [P*G]
  kl_weight: jax.Array  # [P*G]
  takes_part: jax.Array  # [P*G] bool: valid sample of a group in the reward or KL branch


def card_to_sequences(card: AdvantageCard, mask=None) -> SequenceWeights:
  """Flattens an AdvantageCard [P, G] into per-sequence weights [P*G]."""
  p, g = card.advantages.shape
  sample = jnp.ones((p, g), bool) if mask is None else jnp.asarray(mask, bool)
  takes_part = sample & (card.valid | (card.kl_weight > 0))[:, None]
  return SequenceWeights(
    advantages=jax.lax.stop_gradient(card.advantages).reshape(-1),
    kl_weight=jax.lax.stop_gradient(jnp.broadcast_to(card.kl_weight[:, None], (p, g))).reshape(-1),
    takes_part=takes_part.reshape(-1),
  )


def _surrogate(kind, logp, old_logp, adv_t, token_mask, clip_low, clip_high, dual_clip):
  if kind == "ppo":
    return clipped_surrogate(logp, old_logp, adv_t, clip_low, clip_high, dual_clip)
  if kind == "cispo":
    return cispo_surrogate(logp, old_logp, adv_t, clip_low, clip_high)
  if kind == "gspo":
    return gspo_surrogate(logp, old_logp, adv_t, token_mask, clip_low, clip_high)
  raise ValueError(f"unknown surrogate {kind!r}; expected one of {SURROGATES}")


def reward_branch(
  logp,
  old_logp,
  advantages,
  token_mask,
  *,
  mode: str = "token-mean",
  surrogate: str = "ppo",
  clip_low: float = 0.2,
  clip_high: float = 0.2,
  dual_clip: float | None = None,
  max_len: int | None = None,
) -> tuple[jax.Array, jax.Array]:
  """(sum, denominator) of the reward branch: stop_gradient(c) times the surrogate.

  Args:
    logp, old_logp: [B, T] log-probs of the sampled tokens under the policy and the sampler.
    advantages: [B] per-sequence c (frozen here).
    token_mask: [B, T] tokens that take part (already restricted to participating sequences).
  """
  adv_t = jnp.broadcast_to(jax.lax.stop_gradient(advantages)[:, None], logp.shape)
  per_token = _surrogate(surrogate, logp, old_logp, adv_t, token_mask, clip_low, clip_high, dual_clip)
  return aggregate(per_token, token_mask, mode, max_len)


def kl_branch(
  logp,
  ref_logp,
  kl_weight,
  token_mask,
  *,
  beta: float,
  kind: str = "k3",
  mode: str = "token-mean",
  max_len: int | None = None,
) -> tuple[jax.Array, jax.Array]:
  """(sum, denominator) of the KL branch: beta * kl_weight * KL, never divided by s_q.

  Args:
    logp, ref_logp: [B, T] log-probs under the policy and the frozen reference.
    kl_weight: [B] per-sequence multiplier of beta.
    token_mask: [B, T].
  """
  per_token = beta * jax.lax.stop_gradient(kl_weight)[:, None] * kl_penalty(logp, ref_logp, kind)
  return aggregate(per_token, token_mask, mode, max_len)


class PolicyLoss(NamedTuple):
  """(sum, denominator) pairs of the whole loss and of each branch (same denominator)."""

  total: jax.Array
  reward: jax.Array
  kl: jax.Array
  denominator: jax.Array

  def value(self) -> jax.Array:
    """The mean loss: total / denominator (0 when nothing takes part)."""
    return self.total / jnp.maximum(self.denominator, 1e-9)


def policy_loss(
  logp,
  old_logp,
  ref_logp,
  weights: SequenceWeights,
  token_mask,
  *,
  beta: float,
  kl_kind: str = "k3",
  mode: str = "token-mean",
  surrogate: str = "ppo",
  clip_low: float = 0.2,
  clip_high: float = 0.2,
  dual_clip: float | None = None,
  max_len: int | None = None,
) -> PolicyLoss:
  """The policy loss of a minibatch of B sequences from `card_to_sequences` weights.

  Sequences that take part in neither branch leave the token-count denominators.
  logp, old_logp, ref_logp, token_mask: [B, T]; weights: per-sequence [B] fields.
  """
  mask = jnp.asarray(token_mask, bool) & weights.takes_part[:, None]
  r_sum, denom = reward_branch(
    logp,
    old_logp,
    weights.advantages,
    mask,
    mode=mode,
    surrogate=surrogate,
    clip_low=clip_low,
    clip_high=clip_high,
    dual_clip=dual_clip,
    max_len=max_len,
  )
  if isinstance(beta, (int, float)) and beta == 0:
    kl_sum = jnp.zeros_like(r_sum)
  else:
    kl_sum, _ = kl_branch(logp, ref_logp, weights.kl_weight, mask, beta=beta, kind=kl_kind, mode=mode, max_len=max_len)
  return PolicyLoss(total=r_sum + kl_sum, reward=r_sum, kl=kl_sum, denominator=denom)
