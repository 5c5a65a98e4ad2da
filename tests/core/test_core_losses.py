import jax
import jax.numpy as jnp
import numpy as np
import pytest

from maxnorm_jax.core import advantages, losses


def test_kl_estimators_values():
  logp = jnp.array([0.0, 1.0, -30.0])
  ref = jnp.array([0.5, 0.0, 0.0])
  d = np.array([-0.5, 1.0, -30.0])
  np.testing.assert_allclose(losses.kl_penalty(logp, ref, "k1"), d, rtol=1e-6)
  np.testing.assert_allclose(losses.kl_penalty(logp, ref, "k2"), d**2 / 2, rtol=1e-6)
  k3 = np.exp(-np.clip(d, -20, 20)) + np.clip(d, -20, 20) - 1
  np.testing.assert_allclose(losses.kl_penalty(logp, ref, "k3"), np.clip(k3, -10, 10), rtol=1e-6)
  with pytest.raises(ValueError, match="unknown KL estimator 'k4'"):
    losses.kl_penalty(logp, ref, "k4")


def test_clipped_surrogate_clip_higher_and_dual_clip():
  old = jnp.zeros(4)
  logp = jnp.log(jnp.array([1.5, 1.5, 0.5, 5.0]))
  adv = jnp.array([1.0, -1.0, -1.0, -1.0])
  loss = losses.clipped_surrogate(logp, old, adv, clip_low=0.2, clip_high=0.28)
  np.testing.assert_allclose(loss, [-1.28, 1.5, 0.8, 5.0], rtol=1e-6)
  dual = losses.clipped_surrogate(logp, old, adv, clip_low=0.2, clip_high=0.28, dual_clip=3.0)
  np.testing.assert_allclose(dual, [-1.28, 1.5, 0.8, 3.0], rtol=1e-6)
  huge = losses.clipped_surrogate(jnp.array([100.0]), jnp.array([0.0]), jnp.array([1.0]), 0.2, 1e9)
  np.testing.assert_allclose(huge, [-np.exp(20.0)], rtol=1e-5)  # log-ratio clamp


def test_cispo_and_gspo_gradients():
  old = jnp.zeros((1, 3))
  adv = jnp.ones((1, 3))
  mask = jnp.ones((1, 3))
  logp = jnp.log(jnp.array([[2.0, 1.0, 0.5]]))
  g = jax.grad(lambda x: losses.cispo_surrogate(x, old, adv, clip_low=1.0, clip_high=0.28).sum())(logp)
  np.testing.assert_allclose(g, -np.array([[1.28, 1.0, 0.5]]), rtol=1e-6)
  seq_ratio = np.exp(np.mean(np.log([2.0, 1.0, 0.5])))
  val = losses.gspo_surrogate(logp, old, adv, mask, clip_low=10.0, clip_high=10.0)
  np.testing.assert_allclose(val, -seq_ratio * np.ones((1, 3)), rtol=1e-6)
  g = jax.grad(lambda x: losses.gspo_surrogate(x, old, adv, mask, 10.0, 10.0).mean())(logp)
  np.testing.assert_allclose(g, -seq_ratio / 3 * np.ones((1, 3)), rtol=1e-5)


def test_aggregate_modes_and_exact_microbatching():
  rng = np.random.default_rng(0)
  x = rng.normal(size=(6, 5)).astype(np.float32)
  m = rng.uniform(size=(6, 5)) < 0.7
  m[2] = False
  lengths = m.sum(-1)
  expected = {
    "token-mean": (x * m).sum() / m.sum(),
    "seq-mean-token-mean": ((x * m).sum(-1)[lengths > 0] / lengths[lengths > 0]).sum() / 5,
    "seq-mean-token-sum": (x * m).sum() / 5,
    "seq-mean-token-sum-norm": (x * m).sum() / (5 * 5),
  }
  for mode, value in expected.items():
    s, d = losses.aggregate(jnp.asarray(x), jnp.asarray(m), mode)
    np.testing.assert_allclose(s / d, value, rtol=1e-5, err_msg=mode)
    parts = [losses.aggregate(jnp.asarray(x[i : i + 2]), jnp.asarray(m[i : i + 2]), mode) for i in (0, 2, 4)]
    np.testing.assert_allclose(sum(p[0] for p in parts) / sum(p[1] for p in parts), value, rtol=1e-5)
  with pytest.raises(ValueError, match="unknown aggregation mode"):
    losses.aggregate(jnp.asarray(x), jnp.asarray(m), "mean")


def _batch(seed=0, p=2, g=4, t=3):
  rng = np.random.default_rng(seed)
  r = np.array([[1, 0, 0, 1], [0.5, 0.51, 0.5, 0.5]], np.float32)
  logp = jnp.asarray(rng.normal(size=(p * g, t)) * 0.1 - 1.0, jnp.float32)
  old = logp + 0.05
  ref = logp - 0.1
  return r, logp, old, ref, jnp.ones((p * g, t), bool)


def test_policy_loss_branches_kl_not_divided_by_scale():
  r, logp, old, ref, mask = _batch()
  card = advantages.compute("grpo", r)
  w = losses.card_to_sequences(card)
  beta = 0.1
  full = losses.policy_loss(logp, old, ref, w, mask, beta=beta)
  r_sum, d = losses.reward_branch(logp, old, w.advantages, mask)
  kl_sum, _ = losses.kl_branch(logp, ref, w.kl_weight, mask, beta=beta)
  np.testing.assert_allclose(full.total, r_sum + kl_sum, rtol=1e-6)
  np.testing.assert_allclose(full.denominator, d)
  expected_kl = beta * np.asarray(losses.kl_penalty(logp, ref, "k3")).sum()
  np.testing.assert_allclose(full.kl, expected_kl, rtol=1e-5)  # kl_weight 1, no 1/s_q anywhere

  grad_r = jax.grad(lambda x: losses.reward_branch(x, old, w.advantages, mask)[0])(logp)
  grad_full = jax.grad(lambda x: losses.policy_loss(x, old, ref, w, mask, beta=beta).total)(logp)
  grad_kl = jax.grad(lambda x: losses.kl_branch(x, ref, w.kl_weight, mask, beta=beta)[0])(logp)
  np.testing.assert_allclose(grad_full, grad_r + grad_kl, rtol=1e-5, atol=1e-7)


def test_skipped_groups_leave_the_denominator():
  r, logp, old, ref, mask = _batch()
  r[1] = 0.5  # an all-equal group: zero advantage, skipped with kl_weight 0
  from maxnorm_jax.core import protocol

  r2, gv = protocol.apply(r)
  card = protocol.apply_to_card(advantages.compute("rloo", r2), gv)
  w = losses.card_to_sequences(card)
  out = losses.policy_loss(logp, old, ref, w, mask, beta=0.1)
  np.testing.assert_allclose(out.denominator, 4 * 3)  # only group 0's 4 sequences x 3 tokens
  zero = losses.policy_loss(logp, old, ref, w, mask, beta=0.0)
  np.testing.assert_allclose(zero.kl, 0.0)
