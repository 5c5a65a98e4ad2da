"""parallel/: the one rules table, the one mesh check, rows and replicated placement."""

import importlib.util
import os

import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import PartitionSpec as P

from maxnorm_jax import parallel

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@pytest.fixture(scope="module")
def mesh():
  return parallel.make_mesh({"data": 4, "fsdp": 2})


def test_the_config_uses_the_one_rules_table(mesh):
  spec = importlib.util.spec_from_file_location("cfg", os.path.join(ROOT, "configs", "default.py"))
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  assert tuple(module.get_config().rules) == parallel.DEFAULT_RULES
  assert parallel.logical_to_spec(("batch", None), parallel.DEFAULT_RULES, mesh) == P(("data", "fsdp"))


@pytest.mark.parametrize(
  "sizes, message",
  [
    ({"pipeline": 2}, "mesh.pipeline: unknown mesh axis"),
    ({"data": 0}, "mesh.data: must be a positive integer or -1, got 0"),
    ({"data": True}, "mesh.data: must be a positive integer or -1"),
    ({"data": -1, "fsdp": -1}, "mesh: at most one axis may be -1"),
  ],
)
def test_check_axis_sizes_names_the_axis(sizes, message):
  with pytest.raises(ValueError, match=message):
    parallel.check_axis_sizes(sizes)


def test_check_axis_sizes_resolves_minus_one_against_the_devices():
  assert parallel.check_axis_sizes({"data": -1, "tensor": 2}) == {"data": -1, "tensor": 2}
  assert parallel.check_axis_sizes({"data": -1, "tensor": 2}, 8) == {"data": 4, "tensor": 2}
  with pytest.raises(ValueError, match="mesh: 8 devices do not divide"):
    parallel.check_axis_sizes({"data": -1, "tensor": 3}, 8)


def test_rows_take_rows_and_replicated(mesh):
  x = np.arange(16 * 3, dtype=np.float32).reshape(16, 3)
  rows = parallel.rows_array(x, mesh, parallel.DEFAULT_RULES)
  assert rows.sharding.spec == P(("data", "fsdp")) and len(rows.addressable_shards) == 8
  assert rows.addressable_shards[0].data.shape == (2, 3)
  pick = parallel.replicated_array(np.array([15, 0, 3, 3, 8, 1, 2, 9], np.int32), mesh)
  assert pick.sharding.spec == P()
  taken = parallel.take_rows(rows, pick, mesh, parallel.DEFAULT_RULES)
  np.testing.assert_array_equal(np.asarray(taken), x[[15, 0, 3, 3, 8, 1, 2, 9]])
  assert taken.sharding.spec == P(("data", "fsdp"))
  assert parallel.batch_sharding(mesh, parallel.DEFAULT_RULES, (6, 3)).spec == P("fsdp")  # 4 does not divide 6
  assert parallel.constrain(jnp.ones(3), ("batch",), None, parallel.DEFAULT_RULES).shape == (3,)
