"""core.truncation: the truncated, renormalised, temperature-scaled distribution, by hand."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from maxnorm_jax.core import truncation

LOGITS = jnp.array([[2.0, 1.0, 0.0, -1.0, -3.0]])


def _log_softmax(x):
  x = np.asarray(x, np.float64)
  return x - np.log(np.sum(np.exp(x)))


def test_no_truncation_is_the_tempered_softmax():
  assert not truncation.truncates(0, 1.0) and not truncation.truncates(5, 1.0, vocab_size=5)
  lp = truncation.log_probs(LOGITS, temperature=0.5)
  np.testing.assert_allclose(lp[0], _log_softmax(LOGITS[0] / 0.5), atol=1e-6)


def test_top_k_and_top_p_keep_and_renormalise():
  # top_k = 3 keeps logits 2, 1, 0, renormalised over them
  lp = truncation.log_probs(LOGITS, top_k=3)
  np.testing.assert_allclose(lp[0, :3], _log_softmax([2.0, 1.0, 0.0]), atol=1e-6)
  assert np.all(np.isneginf(lp[0, 3:]))
  # top_p = 0.7: p = 0.636, 0.234, ... -> the first token's mass 0.636 < 0.7, so two tokens are kept
  lp = truncation.log_probs(LOGITS, top_p=0.7)
  np.testing.assert_allclose(lp[0, :2], _log_softmax([2.0, 1.0]), atol=1e-6)
  assert np.all(np.isneginf(lp[0, 2:]))
  # top_p applies to the top-k distribution: with top_k = 2, p = 0.731, 0.269 -> one token at 0.7
  lp = truncation.log_probs(LOGITS, top_k=2, top_p=0.7)
  np.testing.assert_allclose(lp[0], [0.0, -np.inf, -np.inf, -np.inf, -np.inf])


def test_token_log_probs_value_entropy_and_a_token_outside_the_set():
  tokens = jnp.array([1])
  logp, entropy = truncation.token_log_probs(LOGITS / 2, tokens, temperature=0.5, top_k=3)
  ref = _log_softmax([2.0, 1.0, 0.0])
  assert float(logp[0]) == pytest.approx(ref[1], abs=1e-6)
  assert float(entropy[0]) == pytest.approx(-np.sum(np.exp(ref) * ref), abs=1e-6)
  # token 4 lies outside the top 3: it joins the kept set instead of scoring -inf
  logp, _ = truncation.token_log_probs(LOGITS, jnp.array([4]), top_k=3)
  assert float(logp[0]) == pytest.approx(_log_softmax([2.0, 1.0, 0.0, -3.0])[3], abs=1e-6)


def test_gradients_are_finite_and_zero_outside_the_kept_set():
  def loss(x):
    logp, entropy = truncation.token_log_probs(x, jnp.array([0]), top_k=2, top_p=0.95)
    return jnp.sum(logp) + jnp.sum(entropy)

  g = jax.grad(loss)(LOGITS)
  assert np.all(np.isfinite(g))
  np.testing.assert_array_equal(g[0, 2:], 0.0)
  assert np.all(g[0, :2] != 0.0)
