"""Attention in query blocks (model.attention_chunk) gives the unblocked result and gradients."""

import jax
import jax.numpy as jnp
import numpy as np

from maxnorm_jax.models import ModelConfig, create_model
from maxnorm_jax.models.decoder import hidden_states


def test_chunked_attention_matches_whole_sequence():
  cfg = ModelConfig.tiny(vocab_size=64, num_layers=1)
  w = create_model(cfg, seed=1).weights()
  ids = jax.random.randint(jax.random.key(0), (2, 11), 0, 64)
  mask = jnp.ones((2, 11), bool).at[0, :3].set(False)  # left padding in one row

  def loss(w, c):
    h, _ = hidden_states(c, w, ids, mask)
    return jnp.sum(jnp.where(mask[..., None], h, 0.0) ** 2), h

  (l0, h0), g0 = jax.value_and_grad(loss, has_aux=True)(w, cfg)
  (l4, h4), g4 = jax.value_and_grad(loss, has_aux=True)(w, cfg.replace(attention_chunk=4))  # 11 = 3 blocks, padded
  np.testing.assert_allclose(h4, h0, rtol=1e-5, atol=1e-5)
  np.testing.assert_allclose(l4, l0, rtol=1e-5)
  for a, b in zip(jax.tree.leaves(g4), jax.tree.leaves(g0)):  # float32 sums over blocks in another order
    np.testing.assert_allclose(a, b, rtol=1e-3, atol=1e-4 * max(1.0, float(np.abs(b).max())))
