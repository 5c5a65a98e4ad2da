"""Estimators under jit with inputs sharded over an 8-device mesh (conftest forces 8 CPU devices)."""

import jax
import numpy as np
import pytest
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as Ps

from maxnorm_jax.core import advantages, protocol


@pytest.fixture(scope="module")
def mesh():
  assert jax.device_count() == 8
  return jax.make_mesh((8,), ("data",))


@pytest.mark.parametrize("name", advantages.names())
def test_sharded_matches_unsharded(name, mesh):
  rng = np.random.default_rng(0)
  r = (rng.integers(0, 4, size=(16, 8)) / 3).astype(np.float32)
  m = rng.uniform(size=(16, 8)) < 0.8
  expected = advantages.compute(name, r, m)
  spec = NamedSharding(mesh, Ps("data", None))
  rs, ms = jax.device_put(r, spec), jax.device_put(m, spec)
  with jax.set_mesh(mesh):
    card = jax.jit(lambda a, b: advantages.compute(name, a, b))(rs, ms)
  assert card.advantages.sharding.spec[0] == "data"
  np.testing.assert_allclose(card.advantages, expected.advantages, rtol=1e-5, atol=1e-6)
  np.testing.assert_allclose(card.kl_weight, expected.kl_weight, rtol=1e-5)
  np.testing.assert_array_equal(card.valid, expected.valid)


def test_sharded_protocol(mesh):
  rng = np.random.default_rng(1)
  r = rng.uniform(size=(16, 8)).astype(np.float32) * 0.02
  spec = NamedSharding(mesh, Ps("data", None))
  with jax.set_mesh(mesh):
    out, valid = jax.jit(lambda a: protocol.apply(a, None, binning=True))(jax.device_put(r, spec))
  ref_out, ref_valid = protocol.apply(r, None, binning=True)
  np.testing.assert_allclose(out, ref_out, rtol=1e-6)
  np.testing.assert_array_equal(valid, ref_valid)
