"""RMSNorm's float32 weight product and RoPE's hand-written gradient (docs/DESIGN.md 3.4)."""

import types

import jax
import jax.numpy as jnp
import numpy as np

from maxnorm_jax.models import layers


def _cos_sin(batch, length, head_dim):
  cfg = types.SimpleNamespace(head_dim=head_dim, rope_theta=10000.0, rope_scaling_factor=None)
  return layers.rope_cos_sin(cfg, jnp.arange(length)[None, :].repeat(batch, 0) + 3)


def test_rope_gradient_is_the_transpose_of_the_rotation():
  cos, sin = _cos_sin(2, 5, 8)
  x = jax.random.normal(jax.random.key(0), (2, 5, 3, 8))
  g = jax.random.normal(jax.random.key(1), x.shape)
  ours = jax.vjp(lambda x: layers.apply_rope(x, cos, sin), x)[1](g)[0]
  derived = jax.vjp(lambda x: layers._rotate(x, cos, sin), x)[1](g)[0]
  np.testing.assert_allclose(np.asarray(ours), np.asarray(derived), atol=1e-6)
  # a rotation keeps norms, so its transpose does too
  np.testing.assert_allclose(float(jnp.linalg.norm(ours)), float(jnp.linalg.norm(g)), rtol=1e-5)


def test_rope_positions_get_no_gradient():
  cos, sin = _cos_sin(1, 4, 8)
  x = jnp.ones((1, 4, 2, 8))
  grad_cos = jax.grad(lambda c: jnp.sum(layers.apply_rope(x, c, sin)))(cos)
  assert grad_cos.shape == (1, 4, 8)
  assert float(jnp.max(jnp.abs(grad_cos))) == 0.0


def test_bf16_rms_norm_rounds_like_the_16bit_product_and_its_weight_gradient_is_float32_exact():
  x = jax.random.normal(jax.random.key(2), (4, 6, 32), jnp.bfloat16)
  w = (1.0 + 0.1 * jax.random.normal(jax.random.key(3), (32,))).astype(jnp.bfloat16)
  out = layers.rms_norm(x, w, 1e-6)
  xf = x.astype(jnp.float32)
  y = (xf * jax.lax.rsqrt(jnp.mean(xf * xf, axis=-1, keepdims=True) + 1e-6)).astype(jnp.bfloat16)
  assert out.dtype == jnp.bfloat16
  np.testing.assert_array_equal(np.asarray(out, np.float32), np.asarray(w * y, np.float32))
  g = jax.random.normal(jax.random.key(4), x.shape, jnp.bfloat16)
  grad_w = jax.vjp(lambda w: layers.rms_norm(x, w, 1e-6), w)[1](g)[0]
  expected = jnp.sum(g.astype(jnp.float32) * y.astype(jnp.float32), axis=(0, 1)).astype(jnp.bfloat16)
  assert grad_w.dtype == jnp.bfloat16
  np.testing.assert_array_equal(np.asarray(grad_w, np.float32), np.asarray(expected, np.float32))
