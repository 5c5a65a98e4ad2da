"""Sampling methods: argmax ties, temperature, top-k and top-p supports, validation."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from maxnorm_jax.sampling import Categorical, Greedy, first_argmax, make_method


def test_first_argmax_takes_the_first_of_ties():
  x = jnp.array([[1.0, 3.0, 3.0, 0.0], [5.0, 5.0, 5.0, 5.0], [-1.0, -2.0, -3.0, -0.5]])
  np.testing.assert_array_equal(first_argmax(x), [1, 0, 3])


def test_greedy_returns_argmax_and_model_logprob():
  logits = jnp.array([[0.0, 2.0, 1.0], [3.0, 0.0, 0.0]])
  tokens, logp = Greedy().sample(logits, jax.random.key(0))
  np.testing.assert_array_equal(tokens, [1, 0])
  np.testing.assert_allclose(logp, jax.nn.log_softmax(logits)[jnp.arange(2), tokens], atol=1e-6)


def test_temperature_scales_the_distribution():
  logits = jnp.array([[0.0, 1.0, 2.0]])
  np.testing.assert_allclose(Categorical(0.5).log_probs(logits), jax.nn.log_softmax(logits / 0.5), rtol=1e-6)


def test_top_p_keeps_the_smallest_set_reaching_p():
  probs = jnp.array([[0.5, 0.3, 0.15, 0.05]])
  p = jnp.exp(Categorical(top_p=0.7).log_probs(jnp.log(probs)))
  np.testing.assert_allclose(p, [[0.625, 0.375, 0.0, 0.0]], atol=1e-6)
  p = jnp.exp(Categorical(top_p=0.81).log_probs(jnp.log(probs)))
  np.testing.assert_allclose(p, [[0.5 / 0.95, 0.3 / 0.95, 0.15 / 0.95, 0.0]], atol=1e-6)


def test_top_k_sampling_stays_in_the_top_k():
  logits = jnp.array(np.random.RandomState(0).randn(2, 50), jnp.float32)
  method = Categorical(temperature=2.0, top_k=3)
  keys = jax.random.split(jax.random.key(1), 200)
  tokens, logp = jax.vmap(lambda k: method.sample(logits, k))(keys)
  top3 = np.argsort(-np.asarray(logits), axis=-1)[:, :3]
  for row in range(2):
    seen = set(np.asarray(tokens)[:, row].tolist())
    assert seen == set(top3[row].tolist())
  expected = np.asarray(method.log_probs(logits))[np.arange(2)[None], np.asarray(tokens)]
  np.testing.assert_allclose(logp, expected, rtol=1e-6)
  assert np.isfinite(expected).all()


def test_make_method_and_validation():
  assert make_method(0.0) == Greedy()
  assert make_method(0.7, 0.9, 5) == Categorical(0.7, 0.9, 5)
  with pytest.raises(ValueError, match="top_p"):
    Categorical(top_p=0.0)
  with pytest.raises(ValueError, match="temperature"):
    Categorical(temperature=-1.0)
  with pytest.raises(ValueError, match="top_k"):
    Categorical(top_k=-2)
  with pytest.raises(Exception):
    Greedy().x = 1  # frozen


def test_sample_rows_draws_each_row_from_its_own_key_with_the_right_frequencies():
  logits = jnp.array([[2.0, 0.0, 1.0, -1.0, 0.5, -3.0]], jnp.float32)
  method = Categorical(temperature=1.0, top_k=4)
  rows = 20000
  keys = jax.random.split(jax.random.key(3), rows)
  tokens, logp = method.sample_rows(jnp.tile(logits, (rows, 1)), keys)
  probs = np.exp(np.asarray(method.log_probs(logits))[0])
  freq = np.bincount(np.asarray(tokens), minlength=6) / rows
  np.testing.assert_allclose(freq, probs, atol=0.012)
  assert freq[3] == 0 and freq[5] == 0  # outside the top 4
  np.testing.assert_allclose(logp, np.asarray(method.log_probs(logits))[0][np.asarray(tokens)], rtol=1e-6)
  perm = np.random.RandomState(0).permutation(64)
  t64, _ = method.sample_rows(jnp.tile(logits, (64, 1)), keys[:64])
  t_perm, _ = method.sample_rows(jnp.tile(logits, (64, 1)), keys[:64][perm])
  np.testing.assert_array_equal(np.asarray(t_perm), np.asarray(t64)[perm])
