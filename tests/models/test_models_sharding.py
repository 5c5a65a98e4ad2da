"""Meshes, logical-axis rules, sharded creation and sharded loading on 8 simulated devices."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import AxisType
from jax.sharding import PartitionSpec as P

from maxnorm_jax.models import ModelConfig, create_model, hf
from maxnorm_jax.parallel import DEFAULT_RULES, logical_to_spec, make_mesh


@pytest.fixture(scope="module")
def mesh():
  return make_mesh({"data": 2, "fsdp": 2, "tensor": 2})


def test_make_mesh_axes_and_errors():
  m = make_mesh({"data": -1, "tensor": 2})
  assert dict(m.shape) == {"data": 4, "tensor": 2}
  assert m.axis_types == (AxisType.Auto, AxisType.Auto)
  e = make_mesh({"data": 8}, axis_type=AxisType.Explicit)
  assert e.axis_types == (AxisType.Explicit,)
  assert dict(make_mesh().shape) == {"data": 8}
  with pytest.raises(ValueError, match="needs 6 devices"):
    make_mesh({"data": 3, "tensor": 2})
  with pytest.raises(ValueError, match="at most one"):
    make_mesh({"data": -1, "tensor": -1})


def test_logical_to_spec_rules(mesh):
  assert logical_to_spec(("embed", "heads", "head_dim"), DEFAULT_RULES, mesh) == P("fsdp", "tensor")
  assert logical_to_spec(("vocab", "embed"), DEFAULT_RULES, mesh) == P("tensor", "fsdp")
  # "expert" is not a mesh axis here; a mesh axis is used once; sizes must divide.
  assert logical_to_spec(("expert", "embed", "mlp"), DEFAULT_RULES, mesh) == P(None, "fsdp", "tensor")
  assert logical_to_spec(("heads", "kv_heads"), DEFAULT_RULES, mesh) == P("tensor")
  assert logical_to_spec(("embed", "mlp"), DEFAULT_RULES, mesh, shape=(64, 3)) == P("fsdp")
  rules = (("embed", ("fsdp", "tensor")),)
  assert logical_to_spec(("embed",), rules, mesh, shape=(64,)) == P(("fsdp", "tensor"))
  assert logical_to_spec(("unknown", None), rules, mesh) == P()


def test_create_sharded_matches_unsharded(mesh):
  cfg = ModelConfig.tiny(vocab_size=128, tie_word_embeddings=False)
  sharded = create_model(cfg, mesh, seed=3)
  plain = create_model(cfg, seed=3)
  q = sharded.layers[0].q[...]
  assert q.sharding.spec == P("fsdp", "tensor")
  assert sharded.lm_head[...].sharding.spec == P("fsdp", "tensor")
  assert sharded.embed[...].sharding.spec == P("tensor", "fsdp")
  # Each device holds a quarter of q: [64, 4, 16] split on embed (2) and heads (2).
  assert {s.data.shape for s in q.addressable_shards} == {(32, 2, 16)}
  ids = jnp.asarray(np.random.RandomState(0).randint(0, 128, (4, 6)))
  np.testing.assert_allclose(np.asarray(jax.jit(lambda m, x: m(x))(sharded, ids)), np.asarray(plain(ids)), atol=1e-5)


def test_hf_load_onto_mesh(mesh, hf_checkpoints, jax_models, padded_batch):
  ids, mask = padded_batch
  path, _ = hf_checkpoints["qwen3_moe"]
  model = hf.load(path, mesh=mesh)
  gate = model.layers[0].expert_gate[...]
  assert gate.sharding.spec == P(None, "fsdp", "tensor")
  assert {s.data.shape for s in gate.addressable_shards} == {(4, 32, 16)}
  got = np.asarray(jax.jit(lambda m, x, a: m(x, a))(model, jnp.asarray(ids), jnp.asarray(mask)))
  ref = np.asarray(jax_models["qwen3_moe"](jnp.asarray(ids), jnp.asarray(mask)))
  assert np.max(np.abs(got - ref) * mask[..., None]) < 1e-5


def test_explicit_mesh_is_used_through_its_auto_view(padded_batch):
  from jax.sharding import AxisType

  from maxnorm_jax.parallel import auto_axes

  explicit = make_mesh({"data": 2, "fsdp": 2, "tensor": 2}, axis_type=AxisType.Explicit)
  model = create_model(ModelConfig.tiny(vocab_size=128), explicit, seed=0)
  assert model.embed[...].sharding.mesh.axis_types == (AxisType.Auto,) * 3
  assert auto_axes(explicit).axis_names == explicit.axis_names
  ids = jnp.asarray(padded_batch[0])
  with jax.set_mesh(auto_axes(explicit)):
    logits = jax.jit(lambda m, x: m(x))(model, ids)
  assert logits.shape == (3, 10, 128) and bool(jnp.all(jnp.isfinite(logits)))
