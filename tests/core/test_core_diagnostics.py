import jax
import jax.numpy as jnp
import numpy as np

from maxnorm_jax.core import advantages, diagnostics, losses


def test_acr_zero_group_and_subres_fractions():
  r = np.array([[1, 1, 1, 1], [0, 0, 0, 0], [0.5, 0.5001, 0.5, 0.5], [1, 0, 0, 0]], np.float32)
  m = np.ones((4, 4), bool)
  np.testing.assert_allclose(diagnostics.acr(r, m), 0.5)
  np.testing.assert_allclose(diagnostics.acr(r, m, tau=1e-3), 0.75)
  np.testing.assert_allclose(diagnostics.subres_frac(r, m), 0.25)
  card = advantages.compute("rloo", r, m)
  np.testing.assert_allclose(diagnostics.zero_group_frac(card, m), 0.5)


def test_scale_percentiles_over_valid_groups():
  r = np.array([[1, 0, 0, 0], [0.5, 0.51, 0.5, 0.5], [0.3] * 4], np.float32)
  grpo = diagnostics.scale_percentiles(advantages.compute("grpo", r))
  maxn = diagnostics.scale_percentiles(advantages.compute("maxnorm_rloo", r))
  s_small = np.std([0.5, 0.51, 0.5, 0.5], ddof=1) + 1e-6
  np.testing.assert_allclose(grpo["inv_scale_p99"], 2.0 + 0.99 * (1 / s_small - 2.0), rtol=1e-4)
  assert float(maxn["inv_scale_p99"]) <= 100.0 + 1e-3  # 1 / tau_res
  np.testing.assert_allclose(maxn["scale_p50"], (0.01 + 1.0) / 2, rtol=1e-5)


def test_kl_stats_and_clip_fractions():
  logp = jnp.array([[0.0, -1.0], [-1.0, -1.0]])
  ref = jnp.array([[0.0, 0.0], [-1.0, -1.0]])
  mask = jnp.array([[True, True], [True, False]])
  stats = diagnostics.kl_stats(logp, ref, mask, "k1")
  np.testing.assert_allclose(stats["kl_mean"], -1 / 3, rtol=1e-6)
  np.testing.assert_allclose(stats["kl_p95"], 0.0 - 0.05 * 0.5, rtol=1e-5)
  old = jnp.zeros((2, 2))
  lp = jnp.log(jnp.array([[1.5, 1.0], [0.5, 0.5]]))
  adv = jnp.array([[1.0], [-1.0]])
  cf = diagnostics.clip_fractions(lp, old, adv, mask)
  np.testing.assert_allclose(cf["clip_frac_high"], 1 / 3, rtol=1e-6)
  np.testing.assert_allclose(cf["clip_frac_low"], 1 / 3, rtol=1e-6)


def test_gradient_diagnostics_on_a_softmax_policy():
  """A one-step softmax policy with 4 answers: closed-form gradients check R/KL and Dir."""
  r = np.array([[0.5, 0.51, 0.5, 0.5]], np.float32)  # a credible small gap, std < 1e-2
  actions = jnp.arange(4)
  logits_ref = jnp.zeros(4)
  params = jnp.array([0.1, -0.1, 0.05, 0.0])
  beta = 0.05

  def logp_of(theta):
    return jax.nn.log_softmax(theta)[actions][:, None]  # [B=4, T=1]

  def branches(card):
    w = losses.card_to_sequences(card)
    mask = jnp.ones((4, 1), bool)

    def reward(theta):
      lp = logp_of(theta)
      s, d = losses.reward_branch(lp, jax.lax.stop_gradient(lp), w.advantages, mask)
      return s / d

    def kl(theta):
      s, d = losses.kl_branch(
        logp_of(theta), jax.nn.log_softmax(logits_ref)[actions][:, None], w.kl_weight, mask, beta=1.0
      )
      return s / d

    return reward, kl

  grpo = advantages.compute("grpo", r)
  card_rloo = advantages.compute("rloo", r)
  reward, kl = branches(grpo)
  cardinal, _ = branches(diagnostics.cardinal_card(grpo))
  out = diagnostics.gradient_diagnostics(reward, kl, params, beta, cardinal)
  np.testing.assert_allclose(out["dir_cardinal"], 1.0, rtol=1e-5)  # GRPO = cardinal up to 1/s_q
  reward_rloo, _ = branches(card_rloo)
  out_rloo = diagnostics.gradient_diagnostics(reward_rloo, kl, params, beta)
  ratio = float(out["r_over_kl"]) / float(out_rloo["r_over_kl"])
  s_q = float(grpo.scale[0])
  np.testing.assert_allclose(ratio, (1 / s_q) * 3 / 4, rtol=1e-4)  # rloo's u = 4/3 (r - mean)
  g_r = jax.grad(reward)(params)
  g_kl = jax.grad(kl)(params)
  np.testing.assert_allclose(out["r_over_kl"], np.linalg.norm(g_r) / (beta * np.linalg.norm(g_kl)), rtol=1e-5)
  cos = -np.dot(g_r, g_kl) / np.linalg.norm(g_r) / np.linalg.norm(g_kl)
  np.testing.assert_allclose(out["cos_reward_neg_kl"], cos, rtol=1e-5)
  low = diagnostics.low_variance_groups(grpo, r)
  np.testing.assert_array_equal(low, [True])


def test_small_gap_frac_and_low_variance_stats():
  # groups: ordinary (std 0.5), small credible gap (0.018 once: std 0.0078), sub-resolution, constant
  r = np.array([[1, 0, 1, 0], [0.018, 0, 0, 0], [0.5, 0.5001, 0.5, 0.5], [0.3] * 4], np.float32)
  m = np.ones((4, 4), bool)
  np.testing.assert_allclose(diagnostics.small_gap_frac(r, m), 0.25)
  card = advantages.compute("maxnorm_rloo", r, m)  # the constant group 3 is not valid (not updated)
  assert np.asarray(card.valid).tolist() == [True, True, True, False]
  # per-token KL (k1) of row q*4+i: row value v, 2 tokens each; low-variance updated groups: 1, 2
  kl_rows = np.arange(16, dtype=np.float32)
  logp = jnp.asarray(np.repeat(kl_rows[:, None], 2, axis=1))
  ref = jnp.zeros((16, 2))
  tm = jnp.ones((16, 2), bool)
  out = diagnostics.low_variance_stats(card, r, m, tm, logp, ref, "k1")
  assert float(out["lowvar_groups"]) == 2.0
  np.testing.assert_allclose(out["lowvar_kl_mean"], kl_rows[4:12].mean(), rtol=1e-6)
  np.testing.assert_allclose(out["lowvar_kl_p95"], np.percentile(kl_rows[4:12], 95), rtol=1e-5)
  inv = 1.0 / np.asarray(card.scale)[1:3]
  np.testing.assert_allclose(out["lowvar_inv_scale_p99"], np.percentile(inv, 99), rtol=1e-5)
  assert float(out["lowvar_inv_scale_p99"]) <= 100.0 + 1e-3  # 1 / tau_res
  none = diagnostics.low_variance_stats(card.replace(valid=jnp.array([True, False, False, False])), r, m, tm, logp, ref)
  assert float(none["lowvar_groups"]) == 0.0 and np.isnan(float(none["lowvar_inv_scale_p95"]))
