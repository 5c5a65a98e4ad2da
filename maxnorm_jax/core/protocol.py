"""The Reward-Resolution Protocol (docs/DESIGN.md §3.3).

`delta_res` is the smallest credible reward gap (1e-2 for rewards in [0, 1]).
- gate: a group whose valid rewards span less than delta_res carries no credible preference and
  is skipped whole (reward branch and KL branch). Gaps are compared with 4 ulp of slack, so a
  float32 0.51 - 0.5 counts as the 0.01 it stands for.
- binning (train-time): inside each group, sorted valid rewards closer than delta_res to their
  neighbour merge (single linkage); each cluster takes its mean. Runs before the estimator.
- zero-group skip: groups whose advantages are all zero leave the update and the token-count
  denominators (`apply_to_card(..., zero_group="skip")`).

Usage:
  rewards2, group_valid = protocol.apply(rewards, mask, delta_res=1e-2, gate=True, binning=False)
  card = advantages.compute(name, rewards2, mask)
  card = protocol.apply_to_card(card, group_valid, zero_group="skip")
"""

import jax
import jax.numpy as jnp

from maxnorm_jax.core import groups
from maxnorm_jax.core.cards import AdvantageCard

ZERO_GROUP_MODES = ("skip", "keep")


def gate(rewards, mask=None, delta_res: float = 1e-2) -> jax.Array:
  """[P] bool: the group has >= 2 valid samples whose rewards span at least delta_res."""
  rewards, mask = groups.as_rewards_and_mask(rewards, mask)
  slack = groups.resolution_tolerance(rewards, mask)
  return (groups.count(mask) >= 2) & (groups.span(rewards, mask) >= delta_res - slack)


def binning(rewards, mask=None, delta_res: float = 1e-2) -> jax.Array:
  """[P, G] rewards with single-linkage delta_res clusters replaced by their means.

  Within each group the valid rewards are sorted; a gap of at least delta_res between sorted
  neighbours starts a new cluster. Masked entries are returned unchanged.
  """
  rewards, mask = groups.as_rewards_and_mask(rewards, mask)
  g = rewards.shape[1]
  big = jnp.asarray(jnp.finfo(rewards.dtype).max, rewards.dtype)
  order = jnp.argsort(jnp.where(mask, rewards, big), axis=-1)
  sorted_r = jnp.take_along_axis(rewards, order, axis=-1)
  sorted_m = jnp.take_along_axis(mask, order, axis=-1)  # valid entries come first
  slack = groups.resolution_tolerance(rewards, mask)[:, None]
  gaps = jnp.diff(sorted_r, axis=-1) >= delta_res - slack
  cluster = jnp.cumsum(
    jnp.concatenate([jnp.zeros_like(gaps[:, :1]), gaps], axis=-1), axis=-1, dtype=jnp.int32
  )  # [P, G] cluster id of each sorted entry
  onehot = (cluster[:, :, None] == jnp.arange(g)[None, None, :]) & sorted_m[:, :, None]
  sums = jnp.einsum("pgc,pg->pc", onehot.astype(rewards.dtype), sorted_r / g)
  counts = jnp.sum(onehot, axis=1).astype(rewards.dtype) / g
  means = sums / jnp.where(counts > 0, counts, 1.0)  # [P, C]
  binned_sorted = jnp.take_along_axis(means, cluster, axis=-1)
  inverse = jnp.argsort(order, axis=-1)
  binned = jnp.take_along_axis(binned_sorted, inverse, axis=-1)
  return jnp.where(mask, binned, rewards)


def apply(
  rewards, mask=None, delta_res: float = 1e-2, gate: bool = True, binning: bool = False
) -> tuple[jax.Array, jax.Array]:
  """The protocol on a batch of rewards [P, G].

  Returns:
    rewards: [P, G], binned when `binning` (else the input, as an array).
    group_valid: [P] bool; with `gate`, False for groups spanning less than delta_res; always
      False for groups with fewer than two valid samples.
  """
  rewards, mask = groups.as_rewards_and_mask(rewards, mask)
  if gate:
    group_valid = _gate(rewards, mask, delta_res)
  else:
    group_valid = groups.count(mask) >= 2
  if binning:
    rewards = _binning(rewards, mask, delta_res)
  return rewards, group_valid


_gate, _binning = gate, binning


def apply_to_card(card: AdvantageCard, group_valid, zero_group: str = "skip") -> AdvantageCard:
  """Applies the gate and the zero-group rule to an estimator's card.

  Gated groups get valid=False, zero advantages and kl_weight 0. With zero_group="skip", groups
  whose advantages are all zero also get kl_weight 0 and valid=False, so they leave the update
  and its denominators; with "keep" they stay in the KL branch.
  """
  if zero_group not in ZERO_GROUP_MODES:
    raise ValueError(f"zero_group must be one of {ZERO_GROUP_MODES}, got {zero_group!r}")
  group_valid = jnp.asarray(group_valid, bool)
  valid = card.valid & group_valid
  kl_weight = jnp.where(group_valid, card.kl_weight, 0.0)
  if zero_group == "skip":
    nonzero = jnp.any(card.advantages != 0, axis=-1)
    valid = valid & nonzero
    kl_weight = jnp.where(valid, kl_weight, 0.0)
  return card.replace(
    advantages=jnp.where(valid[:, None], card.advantages, 0.0),
    kl_weight=kl_weight,
    valid=valid,
  )
