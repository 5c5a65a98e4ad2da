"""Learning simulations on the bandit: the core's estimators, Protocol and losses, real gradients.

One step: sample G answers per prompt from the current tabular policy, score them, run the
Protocol (gate and optional binning), the estimator and the zero-group skip, then take one
on-policy SGD step on loss = reward branch + beta * kl_weight * KL (k3, token-mean), exactly the
core's `losses.policy_loss`. Plain SGD keeps the scale of each method's update visible (an
adaptive optimiser would divide it away).

Every step also records seed 000's Table 3 diagnostics on the updated low-variance groups
(valid groups with reward std < 1e-2) at the pre-update policy: R/KL = ||g_R|| / (beta ||g_KL||),
Dir = cos(g_R, g_R with s_q = 1), cos(g_R, -g_KL), via `diagnostics.gradient_diagnostics`.

The whole run is one `jax.jit` of a `lax.scan` over steps, compiled once per (method, config).
"""

import dataclasses
import functools
from typing import NamedTuple

import jax
import jax.numpy as jnp
import optax

from maxnorm_jax.core import advantages, diagnostics, losses, protocol
from maxnorm_jax.lab import bandit as bandit_lib
from maxnorm_jax.lab.methods import Method


@dataclasses.dataclass(frozen=True)
class SimConfig:
  """Learning-run settings shared by every method (same beta, same learning rate)."""

  group_size: int = 8
  steps: int = 150
  beta: float = 0.3
  lr: float = 3.0
  delta_res: float = 1e-2
  kl_kind: str = "k3"
  seed: int = 0


class Trace(NamedTuple):
  """Per-step records of one run (S steps, P prompts).

  kl: [S, P] exact KL(pi || pi_ref) after the step.
  best_prob: [S, P] probability of the best answers after the step.
  reward: [S, P] expected reward after the step.
  inv_scale: [S, P] 1 / s_q of the step's card.
  valid: [S, P] groups updated by the step (after the Protocol and the zero-group skip).
  low_var: [S, P] updated groups with reward std < 1e-2 (where the diagnostics look).
  grad_norm_reward, grad_norm_kl: [S] ||g_R|| and ||g_KL|| (KL without beta) on low_var groups,
    0 when the step has none; R/KL over a window is sum ||g_R|| / (beta sum ||g_KL||).
  dir_cardinal, cos_reward_neg_kl: [S] cosines on low_var groups, NaN where g_R or g_KL is 0.
  max_abs_c: [S] max |c| over low_var groups (0 when there are none).
  """

  kl: jax.Array
  best_prob: jax.Array
  reward: jax.Array
  inv_scale: jax.Array
  valid: jax.Array
  low_var: jax.Array
  grad_norm_reward: jax.Array
  grad_norm_kl: jax.Array
  dir_cardinal: jax.Array
  cos_reward_neg_kl: jax.Array
  max_abs_c: jax.Array


def _flat(x):
  """[P, G] -> [P*G, 1]: one single-token sequence per sampled answer, group-major."""
  return x.reshape(-1, 1)


def _branches(rows: tuple[Method, ...]):
  """One function per row: (rewards [P, G], states) -> (card without state, states).

  `states` holds the carried state of every stateful estimator among the rows (AVSPO's
  threshold); each branch advances only its own, so all branches share one output structure.
  """

  def make(method):
    def branch(r_in, states):
      state = states.get(method.estimator)
      card = advantages.compute(method.estimator, r_in, None, state=state, **method.kwargs())
      new_states = dict(states)
      if method.estimator in states:
        new_states[method.estimator] = card.state
      return card.replace(state=None), new_states

    return branch

  return [make(m) for m in rows]


def initial_states(rows: tuple[Method, ...]) -> dict:
  """The initial carried state of each stateful estimator among the rows."""
  names = sorted({m.estimator for m in rows})
  return {n: advantages.initial_state(n) for n in names if advantages.initial_state(n) is not None}


def step(rows: tuple[Method, ...], cfg: SimConfig, bandit: bandit_lib.Bandit, row, carry, key):
  """One learning step of row index `row` (a traced int); carry = (logits [P, K], states).

  Returns (carry, records), records a Trace of this step (fields without the S axis).
  """
  logits, states = carry
  g = cfg.group_size
  actions, rewards = bandit_lib.sample(bandit, logits, key, g)
  use_gate = jnp.asarray([m.protocol for m in rows])[row]
  use_bins = jnp.asarray([m.binning for m in rows])[row]
  binned, gated = protocol.apply(rewards, None, delta_res=cfg.delta_res, gate=True, binning=True)
  _, ungated = protocol.apply(rewards, None, delta_res=cfg.delta_res, gate=False, binning=False)
  r_in = jnp.where(use_bins, binned, rewards)
  group_valid = jnp.where(use_gate, gated, ungated)
  card, states = jax.lax.switch(row, _branches(rows), r_in, states)
  card = protocol.apply_to_card(card, group_valid, zero_group="skip")
  weights = losses.card_to_sequences(card)
  old_logp = jax.lax.stop_gradient(_flat(bandit_lib.log_probs(logits, actions)))
  ref_logp = _flat(bandit_lib.log_probs(bandit.ref_logits, actions))
  tokens = jnp.ones_like(old_logp, dtype=bool)

  def total_loss(lg):
    logp = _flat(bandit_lib.log_probs(lg, actions))
    return losses.policy_loss(logp, old_logp, ref_logp, weights, tokens, beta=cfg.beta, kl_kind=cfg.kl_kind).value()

  sgd = optax.sgd(cfg.lr)  # plain SGD: stateless, so the carry holds no optimiser state
  updates, _ = sgd.update(jax.grad(total_loss)(logits), sgd.init(logits))
  new_logits = optax.apply_updates(logits, updates)

  # Table 3 diagnostics on the updated low-variance groups, at the pre-update policy.
  low_var = diagnostics.low_variance_groups(card, rewards)
  lv_tokens = jnp.repeat(low_var, g)[:, None]
  cardinal = losses.card_to_sequences(diagnostics.cardinal_card(card)).advantages

  def reward_loss(adv, lg):
    logp = _flat(bandit_lib.log_probs(lg, actions))
    s, d = losses.reward_branch(logp, old_logp, adv, lv_tokens)
    return s / jnp.maximum(d, 1.0)

  def kl_loss(lg):
    logp = _flat(bandit_lib.log_probs(lg, actions))
    s, d = losses.kl_branch(logp, ref_logp, weights.kl_weight, lv_tokens, beta=1.0, kind=cfg.kl_kind)
    return s / jnp.maximum(d, 1.0)

  grads = diagnostics.gradient_diagnostics(
    functools.partial(reward_loss, weights.advantages),
    kl_loss,
    logits,
    cfg.beta,
    functools.partial(reward_loss, cardinal),
  )
  defined = jnp.any(low_var) & (grads["grad_norm_kl"] > 0) & (grads["grad_norm_reward"] > 0)
  nan = jnp.asarray(jnp.nan, jnp.float32)
  records = Trace(
    kl=bandit_lib.kl_to_ref(new_logits, bandit.ref_logits),
    best_prob=bandit_lib.best_arm_prob(new_logits, bandit.mean_reward),
    reward=bandit_lib.expected_reward(new_logits, bandit.mean_reward),
    inv_scale=1.0 / jnp.where(card.scale > 0, card.scale, 1.0),
    valid=card.valid,
    low_var=low_var,
    grad_norm_reward=jnp.where(jnp.any(low_var), grads["grad_norm_reward"], 0.0),
    grad_norm_kl=jnp.where(jnp.any(low_var), grads["grad_norm_kl"], 0.0),
    dir_cardinal=jnp.where(defined, grads["dir_cardinal"], nan),
    cos_reward_neg_kl=jnp.where(defined, grads["cos_reward_neg_kl"], nan),
    max_abs_c=jnp.max(jnp.where(low_var[:, None], jnp.abs(card.advantages), 0.0)),
  )
  return (new_logits, states), records


@functools.lru_cache(maxsize=None)
def compiled(rows: tuple[Method, ...], cfg: SimConfig):
  """The jitted run `(key, bandit) -> Trace` of all `rows` at once, fields [M, S, ...].

  The rows are vmapped over a row index that selects the estimator branch, so the shared step
  (sampling, Protocol, losses, diagnostics) is compiled once for the whole table. Every row sees
  the same random keys (common random numbers). The bandit is an argument, so other seeds of the
  same shapes reuse the compilation. Cached on (rows, cfg) with cfg.seed ignored.
  """

  @jax.jit
  def run(key, bandit):
    init = (bandit.init_logits, initial_states(rows))

    def run_row(row, keys):
      _, trace = jax.lax.scan(functools.partial(step, rows, cfg, bandit, row), init, keys)
      return trace

    keys = jax.random.split(key, cfg.steps)
    return jax.vmap(run_row, in_axes=(0, None))(jnp.arange(len(rows)), keys)

  return run


def simulate(
  rows: tuple[Method, ...],
  cfg: SimConfig = SimConfig(),
  bandit_cfg: bandit_lib.BanditConfig = bandit_lib.BanditConfig(),
) -> dict[str, Trace]:
  """Runs `cfg.steps` learning steps of every row on the bandit; returns {label: Trace}."""
  run = compiled(tuple(rows), dataclasses.replace(cfg, seed=0))
  traces = jax.device_get(run(jax.random.key(cfg.seed), bandit_lib.make_bandit(bandit_cfg)))
  return {m.label: jax.tree.map(lambda x, i=i: x[i], traces) for i, m in enumerate(rows)}
