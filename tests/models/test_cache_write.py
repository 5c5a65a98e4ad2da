"""The decode step's KV-cache write (`layers.write_cache`, docs/DESIGN.md 3.4)."""

import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from maxnorm_jax.models import layers

ZERO = jnp.zeros((), jnp.int32)


def _plain(cache, update, column):
  return jax.lax.dynamic_update_slice(cache, (update * 3 - 1).astype(cache.dtype), (ZERO, ZERO, ZERO, column))


def _write(cache, update, column):
  # the update is computed in the same jit, as the decode step's RoPE of k is
  return layers.write_cache(cache, update * 3 - 1, (ZERO, ZERO, ZERO, column))


@pytest.mark.parametrize("dtype", [jnp.bfloat16, jnp.float16, jnp.float32])
def test_write_cache_equals_dynamic_update_slice_bit_for_bit(dtype):
  cache = jax.random.normal(jax.random.key(0), (4, 2, 8, 6)).astype(dtype)
  update = jax.random.normal(jax.random.key(1), (4, 2, 8, 1)).astype(dtype)
  ours = jax.jit(_write)(cache, update, jnp.int32(4))
  plain = jax.jit(_plain)(cache, update, jnp.int32(4))
  assert ours.dtype == dtype and ours.shape == (4, 2, 8, 6)
  np.testing.assert_array_equal(np.asarray(ours).view(np.uint8), np.asarray(plain).view(np.uint8))


def _update_slices(fn, cache, update):
  text = jax.jit(fn, donate_argnums=0).lower(cache, update, jnp.int32(2)).compile().as_text()
  return re.findall(r"= (\w+)\[[\d,]*\]\{[\d,]*\} dynamic-update-slice\(", text)


def test_a_bfloat16_cache_is_not_updated_in_float32():
  cache, update = jnp.zeros((8, 2, 4, 6), jnp.bfloat16), jnp.ones((8, 2, 4, 1), jnp.bfloat16)
  # what the write works around: XLA:CPU's plain bf16 update-slice runs on a float32 copy
  assert _update_slices(_plain, cache, update) == ["f32"]
  assert _update_slices(_write, cache, update) == ["u16"]
