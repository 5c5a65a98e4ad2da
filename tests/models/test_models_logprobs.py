"""The chunked log-prob pass equals the full-logits computation, values and gradients."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from maxnorm_jax.models import ModelConfig, create_model, next_token_targets, token_logprobs


@pytest.fixture(scope="module")
def setup():
  cfg = ModelConfig.tiny(vocab_size=96)
  model = create_model(cfg, seed=1)
  rng = np.random.RandomState(2)
  ids = jnp.asarray(rng.randint(0, 96, (2, 11)))
  mask = jnp.asarray(np.arange(11)[None] >= np.array([[0], [4]]))  # row 1 left-padded by 4
  return cfg, model, ids, mask


def _reference(model, ids, mask):
  logits = model(ids, mask)
  logp_all = jax.nn.log_softmax(logits, axis=-1)
  targets, tmask = next_token_targets(ids, mask)
  logp = jnp.take_along_axis(logp_all, targets[..., None], axis=-1)[..., 0]
  ent = -jnp.sum(jnp.exp(logp_all) * logp_all, axis=-1)
  return jnp.where(tmask, logp, 0), jnp.where(tmask, ent, 0)


def test_next_token_targets():
  ids = jnp.array([[5, 6, 7], [0, 8, 9]])
  am = jnp.array([[1, 1, 1], [0, 1, 1]])
  t, m = next_token_targets(ids, am)
  np.testing.assert_array_equal(t, [[6, 7, 0], [8, 9, 0]])
  np.testing.assert_array_equal(m, [[True, True, False], [False, True, False]])


def test_chunked_logprobs_and_entropy_match_full_logits(setup):
  _, model, ids, mask = setup
  targets, tmask = next_token_targets(ids, mask)
  out = token_logprobs(model, ids, targets, tmask, attention_mask=mask, chunk_size=4)  # 11 = 4+4+3
  ref_logp, ref_ent = _reference(model, ids, mask)
  assert out.logp.shape == (2, 11) and out.entropy.shape == (2, 11)
  np.testing.assert_allclose(out.logp, ref_logp, atol=1e-5)
  np.testing.assert_allclose(out.entropy, ref_ent, atol=1e-5)
  assert float(out.logp[1, 2]) == 0.0 and float(out.entropy[0, 10]) == 0.0
  assert np.all(np.asarray(out.entropy)[np.asarray(tmask)] > 0)


def test_gradients_match_full_logits_with_and_without_remat(setup):
  cfg, model, ids, mask = setup
  targets, tmask = next_token_targets(ids, mask)

  def chunked_loss(m):
    out = token_logprobs(m, ids, targets, tmask, attention_mask=mask, chunk_size=3)
    return -jnp.sum(out.logp) + 0.1 * jnp.sum(out.entropy)

  def full_loss(m):
    logp, ent = _reference(m, ids, mask)
    return -jnp.sum(logp) + 0.1 * jnp.sum(ent)

  g_chunked = jax.jit(nnx.grad(chunked_loss))(model)
  g_full = jax.jit(nnx.grad(full_loss))(model)
  remat_model = create_model(cfg.replace(remat=True), seed=1)
  g_remat = jax.jit(nnx.grad(chunked_loss))(remat_model)
  for a, b, c in zip(jax.tree.leaves(g_chunked), jax.tree.leaves(g_full), jax.tree.leaves(g_remat)):
    np.testing.assert_allclose(a, b, atol=2e-5)
    np.testing.assert_allclose(c, a, atol=2e-5)
  assert float(jnp.abs(g_chunked.layers[0].q[...]).max()) > 0
