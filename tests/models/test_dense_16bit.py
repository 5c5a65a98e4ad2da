"""layers.dense on 16-bit inputs: float32 accumulation, a 16-bit result, and jax's own gradients."""

import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from maxnorm_jax.models import layers
from maxnorm_jax.models.config import ModelConfig


def _operands(dtype, d=8):
  """x [2, 5, 48] and w [48, 4, d]: d=8 gives K > N (48 > 32), d=16 K <= N (two gradient paths on CPU)."""
  kx, kw, kg = jax.random.split(jax.random.key(0), 3)
  x = jax.random.normal(kx, (2, 5, 48)).astype(dtype)  # [B, T, K]
  w = (jax.random.normal(kw, (48, 4, d)) / 7).astype(dtype)  # [K, H, D]
  g = jax.random.normal(kg, (2, 5, 4, d)).astype(dtype)  # cotangent [B, T, H, D]
  return x, w, g


def _reference(x, w):
  """The same matmul as one float32-accumulating einsum, rounded to the inputs' dtype."""
  return jnp.einsum("btk,khd->bthd", x, w, preferred_element_type=jnp.float32).astype(x.dtype)


def test_bfloat16_dense_value_and_dtype():
  x, w, _ = _operands(jnp.bfloat16)
  y = layers.dense(x, w)
  assert y.dtype == jnp.bfloat16 and y.shape == (2, 5, 4, 8)
  np.testing.assert_array_equal(np.asarray(y, np.float32), np.asarray(_reference(x, w), np.float32))


@pytest.mark.parametrize("d", [8, 16])
def test_bfloat16_dense_gradients_match_jax_autodiff(d):
  x, w, g = _operands(jnp.bfloat16, d)

  def loss(f):
    return lambda x, w: jnp.sum(f(x, w).astype(jnp.float32) * g.astype(jnp.float32))

  dx, dw = jax.grad(loss(layers.dense), argnums=(0, 1))(x, w)
  rx, rw = jax.grad(loss(_reference), argnums=(0, 1))(x, w)
  assert dx.dtype == jnp.bfloat16 and dw.dtype == jnp.bfloat16
  assert dx.shape == x.shape and dw.shape == w.shape
  # Both accumulate in float32 and round once to bfloat16 (8 bits of mantissa): at most one ulp apart.
  for a, b in ((dx, rx), (dw, rw)):
    a, b = np.asarray(a, np.float32), np.asarray(b, np.float32)
    np.testing.assert_allclose(a, b, rtol=2**-7, atol=1e-6)
  exact = jnp.einsum("bthd,khd->btk", g, w, preferred_element_type=jnp.float32)
  np.testing.assert_allclose(np.asarray(dx, np.float32), np.asarray(exact), rtol=2**-7, atol=1e-2)


def test_bfloat16_dense_gradient_keeps_sharded_rows_on_their_devices():
  # x [16, 48] with its rows over 2 devices, w [48, 64] (K <= N: both operands of the backward's
  # dots get row-major transposed copies on CPU). Only the weight gradient's sum crosses devices.
  mesh = jax.sharding.Mesh(np.array(jax.devices()[:2]), ("data",))
  kx, kw, kg = jax.random.split(jax.random.key(2), 3)
  rows = jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec("data"))
  x = jax.device_put(jax.random.normal(kx, (16, 48)).astype(jnp.bfloat16), rows)
  w = jax.device_put(
    (jax.random.normal(kw, (48, 64)) / 7).astype(jnp.bfloat16),
    jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec()),
  )
  g = jax.device_put(jax.random.normal(kg, (16, 64)).astype(jnp.bfloat16), rows)

  def loss(x, w, g):
    return jnp.sum(layers.dense(x, w).astype(jnp.float32) * g.astype(jnp.float32))

  grad = jax.jit(jax.grad(loss, argnums=(0, 1)))
  hlo = grad.lower(x, w, g).compile().as_text()
  assert "all-to-all" not in hlo and "collective-permute" not in hlo
  assert hlo.count("all-reduce(") == 1  # dw
  dx, dw = grad(x, w, g)
  rx, rw = grad(*(jax.device_put(a, jax.devices()[0]) for a in (x, w, g)))
  np.testing.assert_array_equal(np.asarray(dx, np.float32), np.asarray(rx, np.float32))
  np.testing.assert_allclose(np.asarray(dw, np.float32), np.asarray(rw, np.float32), rtol=2**-7, atol=1e-6)


def test_only_16bit_inputs_take_the_custom_gradient():
  x, w, _ = _operands(jnp.float32)
  assert "custom_vjp" not in str(jax.make_jaxpr(layers.dense)(x, w))
  assert "custom_vjp" in str(jax.make_jaxpr(layers.dense)(x.astype(jnp.bfloat16), w.astype(jnp.bfloat16)))
  np.testing.assert_allclose(layers.dense(x, w), jnp.einsum("btk,khd->bthd", x, w), rtol=1e-5, atol=1e-5)


# Two query heads per kv head, as in the decoder's GQA.
_CFG = ModelConfig(
  vocab_size=16, hidden_size=32, intermediate_size=16, num_layers=1, num_heads=4, num_kv_heads=2, head_dim=8
)


def _attention_operands(dtype):
  """q [3, 5, 4, 8], k, v [3, 5, 2, 8] (two query heads per kv head), a causal mask [3, 5, 5]."""
  kq, kk, kv, kg = jax.random.split(jax.random.key(1), 4)
  q = jax.random.normal(kq, (3, 5, 4, 8)).astype(dtype)
  k = jax.random.normal(kk, (3, 5, 2, 8)).astype(dtype)
  v = jax.random.normal(kv, (3, 5, 2, 8)).astype(dtype)
  g = jax.random.normal(kg, (3, 5, 4, 8)).astype(dtype)
  mask = jnp.broadcast_to(jnp.tril(jnp.ones((5, 5), bool)), (3, 5, 5))
  return q, k, v, g, mask


def test_bfloat16_attention_matches_float32_attention_and_its_gradients():
  q, k, v, g, mask = _attention_operands(jnp.float32)
  bf = [a.astype(jnp.bfloat16) for a in (q, k, v)]

  def loss(*qkv):
    return jnp.sum(layers.attend(_CFG, *qkv, mask).astype(jnp.float32) * g)

  out = layers.attend(_CFG, *bf, mask)
  assert out.dtype == jnp.bfloat16 and out.shape == (3, 5, 4, 8)
  assert "custom_vjp" in str(jax.make_jaxpr(lambda *a: layers.attend(_CFG, *a, mask))(*bf))
  ref = layers.attend(_CFG, *[a.astype(jnp.float32) for a in bf], mask)
  np.testing.assert_allclose(np.asarray(out, np.float32), np.asarray(ref), rtol=2**-6, atol=2e-2)
  grads = jax.grad(loss, argnums=(0, 1, 2))(*bf)
  refs = jax.grad(loss, argnums=(0, 1, 2))(*[a.astype(jnp.float32) for a in bf])
  for a, b in zip(grads, refs):
    assert a.dtype == jnp.bfloat16 and a.shape == b.shape
    a, b = np.asarray(a, np.float32), np.asarray(b)
    assert np.linalg.norm(a - b) / np.linalg.norm(b) < 2e-2


def test_bfloat16_attention_gradient_has_no_float32_eigen_dots():
  # XLA:CPU runs a dot with a column-major (lazily transposed) 16-bit operand as a float32 Eigen
  # dot; every dot of the attention's forward and backward must reach YNNPACK's bf16 kernels.
  q, k, v, g, mask = _attention_operands(jnp.bfloat16)

  def loss(*qkv):
    return jnp.sum(layers.attend(_CFG, *qkv, mask).astype(jnp.float32) * g.astype(jnp.float32))

  hlo = jax.jit(jax.grad(loss, argnums=(0, 1, 2))).lower(q, k, v).compile().as_text()
  entry = hlo[hlo.index("\nENTRY") :]
  assert re.findall(r"= \S+ dot\(", entry) == []
  assert entry.count('"kind":"__ynn_fusion"') >= 5


def test_bfloat16_cached_attention_matches_float32_over_two_blocks():
  kq, kk, kv = jax.random.split(jax.random.key(2), 3)
  q = jax.random.normal(kq, (3, 4, 8)).astype(jnp.bfloat16)  # [B, H, D]
  k = jax.random.normal(kk, (3, 2, 8, 6)).astype(jnp.bfloat16)  # [B, K, D, S]
  v = jax.random.normal(kv, (3, 2, 6, 8)).astype(jnp.bfloat16)  # [B, K, S, D]
  key_mask = jnp.arange(6)[None, :] < jnp.array([[6], [4], [1]])  # [B, S]
  k_blocks, v_blocks = (k[..., :2], k[..., 2:]), (v[:, :, :2], v[:, :, 2:])
  out = layers.attend_cached(_CFG, q, k_blocks, v_blocks, key_mask)
  assert out.dtype == jnp.bfloat16 and out.shape == (3, 4, 8)
  k32, v32 = (tuple(b.astype(jnp.float32) for b in blocks) for blocks in (k_blocks, v_blocks))
  ref = layers.attend_cached(_CFG, q.astype(jnp.float32), k32, v32, key_mask)
  np.testing.assert_allclose(np.asarray(out, np.float32), np.asarray(ref), rtol=2**-6, atol=2e-2)
  # The third row sees only its first key: its output is that key's value for each query head.
  np.testing.assert_allclose(np.asarray(out[2], np.float32), np.repeat(np.asarray(v[2, :, 0], np.float32), 2, axis=0))
