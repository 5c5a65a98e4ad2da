"""Group-relative advantage estimators (docs/DESIGN.md §3.2), all returning an `AdvantageCard`.

Every estimator is vectorised over rewards [P, G] with a validity mask [P, G] (ragged groups),
jit-able, and gives zero advantages and `valid=False` for empty, singleton and all-equal groups
(AVSPO repairs all-equal groups, which is its purpose). Estimator parameters are keywords with
the defaults of docs/DESIGN.md §3.2; every std takes `std_ddof` (default 1) and `eps` (default 1e-6).

Usage:
  card = advantages.compute("maxnorm_rloo", rewards, mask=None, tau_res=1e-2)
  card2 = advantages.compute("avspo", rewards2, state=card.state)
"""

import inspect
from typing import Any, Callable

import flax.struct
import jax
import jax.numpy as jnp

from maxnorm_jax.core import groups
from maxnorm_jax.core.cards import AdvantageCard

_REGISTRY: dict[str, Callable[..., AdvantageCard]] = {}
_INITIAL_STATE: dict[str, Callable[[], Any]] = {}


def register(name: str, initial_state: Callable[[], Any] | None = None):
  """Adds an estimator `fn(rewards [P,G], mask [P,G], state, **params) -> AdvantageCard`."""

  def wrap(fn):
    if name in _REGISTRY:
      raise ValueError(f"advantage estimator {name!r} is already registered")
    _REGISTRY[name] = fn
    if initial_state is not None:
      _INITIAL_STATE[name] = initial_state
    return fn

  return wrap


def names() -> list[str]:
  """Sorted registry names."""
  return sorted(_REGISTRY)


def params_of(name: str) -> dict[str, Any]:
  """The keyword parameters of estimator `name` with their defaults."""
  fn = _lookup(name)
  return {
    p.name: p.default for p in inspect.signature(fn).parameters.values() if p.kind is inspect.Parameter.KEYWORD_ONLY
  }


def initial_state(name: str):
  """The carried state a stateful estimator starts from (None when stateless)."""
  _lookup(name)
  return _INITIAL_STATE[name]() if name in _INITIAL_STATE else None


def _lookup(name: str):
  try:
    return _REGISTRY[name]
  except KeyError:
    raise ValueError(f"unknown advantage estimator {name!r}; known: {', '.join(names())}") from None


def compute(name: str, rewards, mask=None, *, state=None, **params) -> AdvantageCard:
  """Runs estimator `name` on rewards [P, G] (numpy or jax) and returns its AdvantageCard.

  Args:
    name: a registry name (see `names()`).
    rewards: [P, G] scalar rewards.
    mask: [P, G] bool validity mask; None means every sample is valid.
    state: the previous card's `state` for stateful estimators (AVSPO); None starts afresh.
    **params: the estimator's keyword parameters (see `params_of(name)`).
  """
  fn = _lookup(name)
  allowed = params_of(name)
  unknown = sorted(set(params) - set(allowed))
  if unknown:
    raise TypeError(f"advantage estimator {name!r} got unknown parameter(s) {unknown}; it takes {sorted(allowed)}")
  rewards, mask = groups.as_rewards_and_mask(rewards, mask)
  if state is None:
    state = initial_state(name)
  return fn(rewards, mask, state, **params)


# ----------------------------------------------------------------------------- helpers


def _card(u, scale, adv, mask, valid, kl_weight=None, state=None) -> AdvantageCard:
  valid = valid & (groups.count(mask) >= 1)
  adv = jnp.where(mask & valid[:, None], adv, 0.0)
  if kl_weight is None:
    kl_weight = jnp.ones(scale.shape, adv.dtype)
  kl_weight = jnp.where(groups.count(mask) >= 1, kl_weight, 0.0).astype(adv.dtype)
  return AdvantageCard(
    numerator=jnp.where(mask, u, 0.0),
    scale=scale.astype(adv.dtype),
    advantages=adv,
    kl_weight=kl_weight,
    valid=valid,
    state=state,
  )


def _safe_div(num, den):
  return num / jnp.where(den > 0, den, 1.0)


def _centered(r, mask):
  return jnp.where(mask, r - groups.mean(r, mask)[:, None], 0.0)


def _loo_factor(r, mask):
  """[P] n/(n-1): RLOO's numerator is this times r - mean_q."""
  n = groups.count(mask).astype(r.dtype)
  return jnp.where(n > 1, n / jnp.maximum(n - 1, 1.0), 0.0)


def _leave_one_out(r, mask):
  return _centered(r, mask) * _loo_factor(r, mask)[:, None]


def _grpo_parts(r, mask, std_ddof, eps):
  u = _centered(r, mask)
  s = groups.centered_std(u, mask, std_ddof, bound=groups.span(r, mask)) + eps
  return u, s, u / s[:, None]


# ----------------------------------------------------------------------------- estimators


@register("grpo")
def grpo(r, mask, state, *, std_ddof: int = 1, eps: float = 1e-6) -> AdvantageCard:
  """GRPO: u = r - mean_q, s_q = std_q + eps."""
  u, s, c = _grpo_parts(r, mask, std_ddof, eps)
  return _card(u, s, c, mask, groups.has_contrast(r, mask))


@register("dr_grpo")
def dr_grpo(r, mask, state) -> AdvantageCard:
  """Dr.GRPO: u = r - mean_q, s_q = 1."""
  u = _centered(r, mask)
  return _card(u, jnp.ones(r.shape[:1], r.dtype), u, mask, groups.has_contrast(r, mask))


@register("rloo")
def rloo(r, mask, state) -> AdvantageCard:
  """RLOO: u = r - mean of the other valid samples = n/(n-1) (r - mean_q), s_q = 1."""
  u = _leave_one_out(r, mask)
  return _card(u, jnp.ones(r.shape[:1], r.dtype), u, mask, groups.has_contrast(r, mask))


def _whiten(u, mask, valid, lengths, std_ddof, eps):
  """Whitens u over all valid samples of valid groups; token-weighted when lengths is given.

  The batch variance is sum w (u - mean)^2 / (sum w - std_ddof), w = 1 per sample or its token
  count: with std_ddof=1 the unbiased (Bessel-corrected) std over samples, or over tokens with
  lengths, as verl's `masked_whiten`.
  """
  sample = mask & valid[:, None]
  w = sample.astype(u.dtype)
  if lengths is not None:
    w = w * jnp.asarray(lengths, u.dtype)
  total = jnp.maximum(jnp.sum(w), 1e-30)
  wn = w / total
  mean_b = jnp.sum(wn * u)
  dev = jnp.where(sample, u - mean_b, 0.0)
  m = jnp.max(jnp.abs(dev))
  safe_m = jnp.where(m > 0, m, 1.0)
  bessel = jnp.sqrt(total / jnp.maximum(total - std_ddof, 1.0))
  std_b = m * jnp.sqrt(jnp.sum(wn * (dev / safe_m) ** 2)) * bessel
  return dev / (std_b + eps), std_b


@register("reinforce_pp")
def reinforce_pp(r, mask, state, *, std_ddof: int = 1, eps: float = 1e-6, lengths=None) -> AdvantageCard:
  """REINFORCE++: u = r whitened over the batch, s = std_B for every prompt.

  std_B has `std_ddof` (default 1: the unbiased std, like GRPO's and verl's whitening).
  `lengths` [P, G] (token counts) makes the batch mean and std token-weighted.
  Groups without internal contrast are left out, as for every estimator here.
  """
  valid = groups.has_contrast(r, mask)
  c, std_b = _whiten(r, mask, valid, lengths, std_ddof, eps)
  return _card(r, jnp.full(r.shape[:1], std_b, r.dtype), c, mask, valid)


@register("reinforce_pp_baseline")
def reinforce_pp_baseline(r, mask, state, *, std_ddof: int = 1, eps: float = 1e-6, lengths=None) -> AdvantageCard:
  """REINFORCE++-baseline: u = r - mean_q, whitened over all valid samples of the batch (std_B
  with `std_ddof`, default 1, as reinforce_pp)."""
  valid = groups.has_contrast(r, mask)
  u = _centered(r, mask)
  c, std_b = _whiten(u, mask, valid, lengths, std_ddof, eps)
  return _card(u, jnp.full(r.shape[:1], std_b, r.dtype), c, mask, valid)


def _maxnorm(u, max_abs_u, r, mask, tau_res):
  s = jnp.maximum(jnp.asarray(tau_res, r.dtype), max_abs_u)
  return _card(u, s, _safe_div(u, s[:, None]), mask, groups.has_contrast(r, mask))


@register("maxnorm_rloo")
def maxnorm_rloo(r, mask, state, *, tau_res: float = 1e-2) -> AdvantageCard:
  """MaxNorm-AC on the RLOO numerator: s_q = max(tau_res, max_j |u_qj|), c = u / s_q."""
  factor = _loo_factor(r, mask)
  u = _centered(r, mask) * factor[:, None]
  # max_j |u_qj| = factor * max_j |r_qj - mean_q|, exactly (rounding is monotone).
  return _maxnorm(u, groups.max_abs_deviation(r, mask) * factor, r, mask, tau_res)


@register("maxnorm_dr_grpo")
def maxnorm_dr_grpo(r, mask, state, *, tau_res: float = 1e-2) -> AdvantageCard:
  """MaxNorm-AC on the Dr.GRPO numerator u = r - mean_q."""
  return _maxnorm(_centered(r, mask), groups.max_abs_deviation(r, mask), r, mask, tau_res)


@register("p90")
def p90(r, mask, state, *, tau_res: float = 1e-2, quantile: float = 0.9) -> AdvantageCard:
  """Percentile-scale reference: s_q = max(tau_res, quantile of |u| over valid samples).

  u from RLOO; linear interpolation (numpy's default). With quantile=1 it is maxnorm_rloo.
  """
  u = _leave_one_out(r, mask)
  q = groups.masked_quantile(jnp.abs(u), mask, quantile)
  s = jnp.maximum(jnp.asarray(tau_res, r.dtype), q)
  return _card(u, s, _safe_div(u, s[:, None]), mask, groups.has_contrast(r, mask))


@register("grpo_beta_comp")
def grpo_beta_comp(
  r, mask, state, *, std_ddof: int = 1, eps: float = 1e-6, beta_comp_max: float = 10.0
) -> AdvantageCard:
  """GRPO advantages with kl_weight_q = clip(s_ref / s_q, 1, beta_comp_max).

  s_ref is the median s_q over valid groups of the batch (our formula: it equalises the
  effective cardinal KL coefficient beta * kl_weight * s_q up to the cap). Groups without
  contrast keep kl_weight 1.
  """
  u, s, c = _grpo_parts(r, mask, std_ddof, eps)
  valid = groups.has_contrast(r, mask)
  s_ref = groups.masked_quantile(s[None, :], valid[None, :], 0.5)[0]
  kl_weight = jnp.where(valid, jnp.clip(s_ref / s, 1.0, beta_comp_max), 1.0)
  return _card(u, s, c, mask, valid, kl_weight=kl_weight)


@register("gopo")
def gopo(r, mask, state, *, ties: str = "average") -> AdvantageCard:
  """GOPO pure ranking: rank rho in 1..n_q by descending reward, advantage 2 - 4 (rho-1)/(n_q-1).

  ties="average": equal rewards share their mean rank (an all-equal group gives 0);
  ties="arbitrary": equal rewards are ranked by position (the original method).
  """
  if ties not in ("average", "arbitrary"):
    raise ValueError(f"gopo: ties must be 'average' or 'arbitrary', got {ties!r}")
  other = mask[:, None, :]  # [P, 1, G] over j
  ri, rj = r[:, :, None], r[:, None, :]
  greater = jnp.sum((rj > ri) & other, axis=-1)
  equal = (rj == ri) & other
  if ties == "average":
    rank = greater + (jnp.sum(equal, axis=-1) + 1) / 2.0
  else:
    g = r.shape[1]
    before = jnp.arange(g)[None, None, :] < jnp.arange(g)[None, :, None]
    rank = greater + jnp.sum(equal & before, axis=-1) + 1.0
  n = groups.count(mask)
  adv = 2.0 - 4.0 * (rank - 1.0) / jnp.maximum(n - 1.0, 1.0)[:, None]
  adv = adv.astype(r.dtype)
  return _card(adv, jnp.ones(r.shape[:1], r.dtype), adv, mask, groups.has_contrast(r, mask))


@register("f_grpo")
def f_grpo(
  r,
  mask,
  state,
  *,
  std_ddof: int = 1,
  eps: float = 1e-6,
  gamma: float = 1.0,
  success_threshold: float = 0.5,
) -> AdvantageCard:
  """Focal GRPO: GRPO advantages times (1 - p_hat_q)^gamma, p_hat_q the group's success rate."""
  u, s, c = _grpo_parts(r, mask, std_ddof, eps)
  p_hat = _safe_div(jnp.sum(mask & (r >= success_threshold), axis=-1), groups.count(mask))
  focal = (1.0 - p_hat).astype(r.dtype) ** gamma
  return _card(u, s, c * focal[:, None], mask, groups.has_contrast(r, mask))


# ----------------------------------------------------------------------------- AVSPO


@flax.struct.dataclass
class AvspoState:
  """AVSPO's carried state: the adaptive threshold and the previous batch's mean reward."""

  tau_adapt: jax.Array
  prev_reward_mean: jax.Array
  has_prev: jax.Array


def _avspo_initial_state(tau_init: float = 0.5) -> AvspoState:
  return AvspoState(
    tau_adapt=jnp.asarray(tau_init, jnp.float32),
    prev_reward_mean=jnp.asarray(0.0, jnp.float32),
    has_prev=jnp.asarray(False),
  )


@register("avspo", initial_state=_avspo_initial_state)
def avspo(
  r,
  mask,
  state,
  *,
  std_ddof: int = 1,
  eps: float = 1e-6,
  tau_collapse: float = 1e-6,
  alpha: float = 0.5,
  r_anchor: float = 0.1,
  eta: float = 0.01,
) -> AdvantageCard:
  """AVSPO (seed 003): GRPO with virtual rewards in collapsed groups.

  A valid group (n_q >= 2) collapsed when std_q < tau_collapse; ACR is the fraction of valid
  groups that collapsed. When ACR > tau_adapt (the carried threshold), each collapsed group gets
  K = max(1, min(n_q, ceil(n_q * ACR^alpha))) virtual rewards: v_k = r_obs (1 - k/(K+1)) when
  its observed reward r_obs > 0, else v_k = min(1, r_anchor k), k = 1..K. Mean and std (ddof 0)
  are then taken over real and virtual rewards, advantages only for the real ones, so
  |A| <= sqrt(K / n_q). Other groups get GRPO advantages. The threshold update (ours):
  tau <- (1-eta) tau + eta ACR if the batch mean reward rose, else max(0, tau - eta ACR);
  the first batch (no previous mean) leaves it unchanged.
  """
  n = groups.count(mask)
  u, s, c = _grpo_parts(r, mask, std_ddof, eps)
  contrast = groups.has_contrast(r, mask)
  pop_std = groups.std(r, mask, ddof=0)
  eligible = n >= 2
  collapsed = eligible & (pop_std < tau_collapse)
  acr = _safe_div(jnp.sum(collapsed), jnp.sum(eligible)).astype(jnp.float32)
  augment = collapsed & (acr > state.tau_adapt)

  g = r.shape[1]
  k_count = jnp.ceil(n * acr**alpha)
  k_count = jnp.maximum(1.0, jnp.minimum(n, k_count))  # [P]
  k = jnp.arange(1, g + 1, dtype=r.dtype)[None, :]  # [1, G]; at most n_q <= G virtual rewards
  virtual_on = k <= k_count[:, None]
  r_obs = groups.mean(r, mask)
  v = jnp.where(
    (r_obs > 0)[:, None],
    r_obs[:, None] * (1.0 - k / (k_count[:, None] + 1.0)),
    jnp.minimum(1.0, r_anchor * k),
  ).astype(r.dtype)
  both = jnp.concatenate([r, v], axis=1)
  both_mask = jnp.concatenate([mask, virtual_on], axis=1)
  aug_u = jnp.where(both_mask, both - groups.mean(both, both_mask)[:, None], 0.0)
  aug_s = groups.centered_std(aug_u, both_mask, 0) + eps
  aug_c = aug_u[:, :g] / aug_s[:, None]

  numerator = jnp.where(augment[:, None], aug_u[:, :g], u)
  scale = jnp.where(augment, aug_s, s)
  adv = jnp.where(augment[:, None], aug_c, c)
  valid = contrast | augment

  batch_n = jnp.maximum(jnp.sum(mask), 1).astype(r.dtype)
  batch_mean = jnp.sum(jnp.where(mask, r / batch_n, 0.0)).astype(jnp.float32)
  rose = state.has_prev & (batch_mean > state.prev_reward_mean)
  tau = state.tau_adapt
  tau_next = jnp.where(
    state.has_prev,
    jnp.where(rose, (1.0 - eta) * tau + eta * acr, jnp.maximum(0.0, tau - eta * acr)),
    tau,
  ).astype(jnp.float32)
  new_state = AvspoState(tau_adapt=tau_next, prev_reward_mean=batch_mean, has_prev=jnp.asarray(True))
  return _card(numerator, scale, adv, mask, valid, state=new_state)
