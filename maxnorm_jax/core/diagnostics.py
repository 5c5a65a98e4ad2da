"""Diagnostics of docs/DESIGN.md §3.5: batch statistics of rewards and cards, KL and clipping, and the
gradient diagnostics of seed 000's Table 3 (R/KL, Dir, cos(g_R, -g_KL)).

All functions are pure and jit-able; they return scalars or dicts of scalars.
"""

from typing import Callable, Sequence

import jax
import jax.numpy as jnp

from maxnorm_jax.core import groups, losses
from maxnorm_jax.core.cards import AdvantageCard

LOW_VARIANCE_STD = 1e-2


def _fraction(flags, among):
  among = jnp.asarray(among, bool)
  return jnp.sum(flags & among) / jnp.maximum(jnp.sum(among), 1)


def acr(rewards, mask=None, tau: float = 1e-6) -> jax.Array:
  """All-collapsed ratio: fraction of groups with >= 2 valid samples whose std (ddof 0) < tau."""
  rewards, mask = groups.as_rewards_and_mask(rewards, mask)
  eligible = groups.count(mask) >= 2
  return _fraction(groups.std(rewards, mask, ddof=0) < tau, eligible)


def zero_group_frac(card: AdvantageCard, mask=None) -> jax.Array:
  """Fraction of non-empty groups whose advantages are all zero."""
  nonempty = jnp.ones(card.valid.shape, bool) if mask is None else jnp.any(jnp.asarray(mask, bool), -1)
  return _fraction(~jnp.any(card.advantages != 0, axis=-1), nonempty)


def subres_frac(rewards, mask=None, delta_res: float = 1e-2) -> jax.Array:
  """Fraction of groups (>= 2 valid samples) whose rewards differ, but by less than delta_res."""
  rewards, mask = groups.as_rewards_and_mask(rewards, mask)
  s = groups.span(rewards, mask)
  return _fraction((s > 0) & (s < delta_res), groups.count(mask) >= 2)


def scale_percentiles(card: AdvantageCard, qs: Sequence[float] = (50, 95, 99)) -> dict[str, jax.Array]:
  """Percentiles of s_q and of 1/s_q over updated (valid) groups.

  Keys `scale_p{q}` and `inv_scale_p{q}`; 0 when no group is valid.
  """
  valid = card.valid[None, :]
  inv = 1.0 / jnp.where(card.scale > 0, card.scale, 1.0)
  out = {}
  for q in qs:
    out[f"scale_p{q:g}"] = groups.masked_quantile(card.scale[None, :], valid, q / 100.0)[0]
    out[f"inv_scale_p{q:g}"] = groups.masked_quantile(inv[None, :], valid, q / 100.0)[0]
  return out


def kl_stats(logp, ref_logp, token_mask, kind: str = "k3") -> dict[str, jax.Array]:
  """Mean per-token KL and the P95 of per-sequence (token-mean) KL over sequences with tokens.

  logp, ref_logp, token_mask: [B, T].
  """
  mask = jnp.asarray(token_mask, bool)
  kl = losses.kl_penalty(logp, ref_logp, kind)
  s, d = losses.aggregate(kl, mask, "token-mean")
  tokens = jnp.sum(mask, -1)
  seq_kl = jnp.sum(jnp.where(mask, kl, 0.0), -1) / jnp.maximum(tokens, 1)
  p95 = groups.masked_quantile(seq_kl[None, :], (tokens > 0)[None, :], 0.95)[0]
  return {"kl_mean": s / jnp.maximum(d, 1), "kl_p95": p95}


def clip_fractions(
  logp, old_logp, adv_per_token, token_mask, clip_low: float = 0.2, clip_high: float = 0.2
) -> dict[str, jax.Array]:
  """Fractions of valid tokens where the PPO clip is active (high: ratio > 1+clip_high with
  A > 0; low: ratio < 1-clip_low with A < 0), and their sum `clip_frac`. Inputs [B, T]."""
  mask = jnp.asarray(token_mask, bool)
  ratio = jnp.exp(jnp.clip(logp - old_logp, -losses.LOG_RATIO_CLAMP, losses.LOG_RATIO_CLAMP))
  adv = jnp.broadcast_to(adv_per_token, ratio.shape)
  high = (ratio > 1.0 + clip_high) & (adv > 0)
  low = (ratio < 1.0 - clip_low) & (adv < 0)
  n = jnp.maximum(jnp.sum(mask), 1)
  f_high = jnp.sum(high & mask) / n
  f_low = jnp.sum(low & mask) / n
  return {"clip_frac": f_high + f_low, "clip_frac_high": f_high, "clip_frac_low": f_low}


def low_variance_groups(card: AdvantageCard, rewards, mask=None, std_threshold: float = LOW_VARIANCE_STD) -> jax.Array:
  """[P] bool: updated groups (valid) whose reward std (ddof 0) is below `std_threshold`."""
  rewards, mask = groups.as_rewards_and_mask(rewards, mask)
  return card.valid & (groups.std(rewards, mask, ddof=0) < std_threshold)


def small_gap_frac(rewards, mask=None, delta_res: float = 1e-2, std_threshold: float = LOW_VARIANCE_STD):
  """Fraction of groups (>= 2 valid samples) with a credible gap (span >= delta_res) but a reward
  std (ddof 0) below `std_threshold`: the "credible small gap" regime, whatever the method."""
  rewards, mask = groups.as_rewards_and_mask(rewards, mask)
  s = groups.span(rewards, mask)
  low = groups.std(rewards, mask, ddof=0) < std_threshold
  return _fraction((s >= delta_res) & low, groups.count(mask) >= 2)


def low_variance_stats(card: AdvantageCard, rewards, mask, token_mask, logp, ref_logp, kind: str = "k3") -> dict:
  """KL and 1/s_q tails restricted to the low-variance updated groups (docs/DESIGN.md §3.5, seed 000's Table 3).

  rewards, mask [P, G]; token_mask, logp, ref_logp [B, T] with B = P * G (row q * G + i).
  Keys `lowvar_groups` (their count), `lowvar_kl_mean`, `lowvar_kl_p95`, `lowvar_inv_scale_p95`,
  `lowvar_inv_scale_p99`; the last four are NaN when there is no such group.
  """
  r, m = groups.as_rewards_and_mask(rewards, mask)
  low = low_variance_groups(card, r, m)
  g = r.shape[-1]
  rows = jnp.repeat(low, g) & m.reshape(-1)
  kl = kl_stats(logp, ref_logp, jnp.asarray(token_mask, bool) & rows[:, None], kind)
  inv = 1.0 / jnp.where(card.scale > 0, card.scale, 1.0)
  count = jnp.sum(low)
  out = {
    "lowvar_kl_mean": kl["kl_mean"],
    "lowvar_kl_p95": kl["kl_p95"],
    "lowvar_inv_scale_p95": groups.masked_quantile(inv[None, :], low[None, :], 0.95)[0],
    "lowvar_inv_scale_p99": groups.masked_quantile(inv[None, :], low[None, :], 0.99)[0],
  }
  out = {k: jnp.where(count > 0, v, jnp.nan) for k, v in out.items()}
  out["lowvar_groups"] = count.astype(jnp.float32)
  return out


def cardinal_card(card: AdvantageCard) -> AdvantageCard:
  """The same card on the cardinal scale: s_q = 1 and advantages = u where valid."""
  return card.replace(
    scale=jnp.ones_like(card.scale),
    advantages=jnp.where(card.valid[:, None], card.numerator, 0.0),
  )


def _flat(tree) -> jax.Array:
  leaves = jax.tree.leaves(tree)
  if not leaves:
    return jnp.zeros((0,), jnp.float32)
  return jnp.concatenate([jnp.ravel(x).astype(jnp.float32) for x in leaves])


def _cosine(a, b):
  na, nb = jnp.linalg.norm(a), jnp.linalg.norm(b)
  return jnp.where((na > 0) & (nb > 0), jnp.dot(a, b) / jnp.maximum(na * nb, 1e-30), 0.0)


def gradient_diagnostics(
  reward_loss_fn: Callable,
  kl_loss_fn: Callable,
  params,
  beta: float,
  cardinal_reward_loss_fn: Callable | None = None,
) -> dict[str, jax.Array]:
  """Gradient diagnostics of one batch, for any loss and parameters (docs/DESIGN.md §3.5).

  Args:
    reward_loss_fn: params -> scalar reward-branch loss of this method.
    kl_loss_fn: params -> scalar KL loss *without* beta (the loss is reward + beta * KL).
    params: any pytree.
    beta: the KL coefficient.
    cardinal_reward_loss_fn: params -> the reward-branch loss of the same batch with s_q = 1
      (see `cardinal_card`); when given, `dir_cardinal` is reported.

  Returns:
    r_over_kl: ||g_R|| / (beta ||g_KL||); cos_reward_neg_kl: cos(g_R, -g_KL);
    grad_norm_reward, grad_norm_kl; dir_cardinal: cos(g_R, g_R at s_q = 1).
  """
  g_r = _flat(jax.grad(reward_loss_fn)(params))
  g_kl = _flat(jax.grad(kl_loss_fn)(params))
  n_r, n_kl = jnp.linalg.norm(g_r), jnp.linalg.norm(g_kl)
  out = {
    "r_over_kl": n_r / jnp.maximum(beta * n_kl, 1e-30),
    "cos_reward_neg_kl": _cosine(g_r, -g_kl),
    "grad_norm_reward": n_r,
    "grad_norm_kl": n_kl,
  }
  if cardinal_reward_loss_fn is not None:
    out["dir_cardinal"] = _cosine(g_r, _flat(jax.grad(cardinal_reward_loss_fn)(params)))
  return out
