"""maxnorm_jax.plan: the real RL step compiled ahead of time for a small TPU slice (libtpu from the
`tpu` extra), per-chip bytes against real shards, FLOPs against XLA's count, and the exit status of
a preset that cannot fit one chip."""

import json
import math
import os
import subprocess
import sys

import jax
import jax.numpy as jnp
import pytest

from maxnorm_jax.plan import roofline as rf
from maxnorm_jax.plan.topology import CHIPS, GIB, parse_topology

pytest.importorskip("libtpu", reason="the planner's TPU tests need the `tpu` extra")

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "tests", "train"))
from trainer_helpers import config_module  # noqa: E402

MESH = dict(data=1, fsdp=2, tensor=2, expert=1)


def small_config():
  """The runlocal tiny model in bfloat16, sharded two ways on fsdp and tensor, with beta > 0 (a
  reference), rematerialised layers, attention in query blocks, two log-prob passes and the
  sampler in two passes of rows."""
  c = config_module().get_config("runlocal=True")
  c.mesh.update(MESH)
  c.model.update(hidden_size=64, intermediate_size=128, num_heads=4, num_kv_heads=2, head_dim=16)
  c.model.update(param_dtype="bfloat16", dtype="bfloat16")
  c.model.update(remat=True, attention_chunk=4)  # 8 + 4 tokens: three query blocks
  c.train.logprob_microbatches = 2
  c.rollout.sample_chunks = 2  # 16 rows sampled as two passes of 8
  c.loss.beta = 0.01
  return c


@pytest.fixture(scope="module")
def compiled():
  from maxnorm_jax.plan.pieces import compile_step
  from maxnorm_jax.plan.report import summarize
  from maxnorm_jax.plan.topology import tpu_devices

  c = small_config()
  topo = parse_topology("v5e:2x2")
  plan = compile_step(c, tpu_devices(topo))
  return c, plan, summarize(plan, topo.chip, "v5e:2x2", c)


def test_topology_names():
  assert parse_topology("v5p-128").desc_name == "v5p:4x4x4"  # TensorCores: 2 per chip
  assert parse_topology("v5p-128").chips == 64
  assert parse_topology("v4-32").desc_name == "v4:2x2x4"
  assert parse_topology("v5e-16").desc_name == "v5e:4x4"  # chips
  assert parse_topology("v5litepod-8").desc_name == "v5e:2x4"
  assert parse_topology("v6e-4").chips == 4
  assert parse_topology("v5p:8x8x8").chips == 512
  assert parse_topology("v5p-8").desc_name == "v5p:2x2x1"
  assert CHIPS["v5p"].hbm_bytes == 95 * GIB and CHIPS["v5e"].hbm_bytes == 16 * GIB
  for bad, message in {
    "v5p-7": "counts TensorCores",
    "v9-8": "unknown TPU generation",
    "v5e:4x4x4": "2-D grids",
    "v5p": "expected e.g.",
    "v5e-12": "not a power of two",
  }.items():
    with pytest.raises(ValueError, match=message):
      parse_topology(bad)


def test_every_piece_compiles_and_fits(compiled):
  _, plan, s = compiled
  # rollout.old_logp="sampler" (the default): no old-policy pass, only the reference's (beta > 0)
  assert list(s["pieces"]) == ["prefill", "decode", "ref_logprobs", "advantage_card", "update"]
  assert s["shapes"]["old_logp"] == "sampler"
  assert s["fits"] and s["chips"] == 4 and s["hbm_bytes_per_chip"] == 16 * GIB
  for name, p in s["pieces"].items():
    assert p["fits"] and p["compiler_error"] is None, name
    assert p["peak_bytes"] >= p["argument_bytes"] > 0, name
  # The update holds the train state (params + Adam's two moments) and the reference stays resident.
  upd = s["pieces"]["update"]
  assert upd["resident_bytes"] == s["reference_bytes_per_chip"] == s["param_bytes_per_chip"]
  assert upd["argument_bytes"] >= s["param_bytes_per_chip"] + s["opt_state_bytes_per_chip"]
  assert s["peak_bytes_per_chip"] == max(p["peak_bytes"] for p in s["pieces"].values())
  assert s["flops_per_step"] == pytest.approx(sum(p["flops"] for p in s["pieces"].values()))
  assert 0 < s["mfu"] <= 1 and s["est_step_s"] > 0
  json.dumps(s)  # the --json object


def test_bf16_update_keeps_float32_moments(compiled):
  """bfloat16 parameters, float32 Adam moments in and out of the update (the trainer's own jit)."""
  _, plan, s = compiled
  update = plan.pieces[-1]
  state = update.args[0]
  moments = [x for x in jax.tree.leaves(state.opt_state) if x.ndim > 0]
  assert moments and all(x.dtype == jnp.float32 for x in moments)
  assert all(x.dtype == jnp.bfloat16 for x in jax.tree.leaves(state.params))
  out = update.compiled.out_info[0]
  assert all(x.dtype == jnp.bfloat16 for x in jax.tree.leaves(out.params))
  assert all(x.dtype == jnp.float32 for x in jax.tree.leaves(out.opt_state) if x.ndim > 0)
  # two float32 moments sharded like the parameters (plus replicated step counters)
  assert 4 * s["param_bytes_per_chip"] <= s["opt_state_bytes_per_chip"] < 4 * s["param_bytes_per_chip"] + 1024


def test_param_bytes_equal_the_real_shards(compiled):
  """The planned per-chip parameter bytes == the shards of a real model on the same mesh shape."""
  from maxnorm_jax.models.create import create_model
  from maxnorm_jax.parallel.mesh import make_mesh
  from maxnorm_jax.train import specs

  c, plan, s = compiled
  mesh = make_mesh(MESH, devices=jax.devices("cpu")[:4])
  weights = create_model(plan.model, mesh, specs.rules_of(c)).weights()
  dev = jax.devices("cpu")[0]
  real = sum(sh.data.nbytes for x in jax.tree.leaves(weights) for sh in x.addressable_shards if sh.device == dev)
  assert s["param_bytes_per_chip"] == real
  total = sum(x.nbytes for x in jax.tree.leaves(weights))
  assert total / 4 <= real < total  # sharded, not replicated
  assert all(x.dtype == jnp.bfloat16 for x in jax.tree.leaves(weights))
  kv = sum(math.prod(x.shape) * x.dtype.itemsize for x in jax.tree.leaves(plan.pieces[1].args[1].caches))
  assert s["kv_cache_bytes_per_chip"] == kv // 4  # rows over fsdp (2) x kv heads over tensor (2)
  rows = c.data.batch_size * c.rollout.group_size
  assert plan.pieces[1].args[1].caches[0][0][0].shape[0] == rows // 2  # one sampler pass holds half the rows


def test_prefill_flops_match_xla(compiled):
  """The prefill has no loop, so XLA's count (per chip) checks the analytic FLOPs."""
  c, plan, s = compiled
  p = s["pieces"]["prefill"]
  rows = c.data.batch_size * c.rollout.group_size
  # the shared prefill runs each pass's prompts once (P/2 rows), not its P x G / 2 rows
  assert plan.prefill_rows == s["shapes"]["prefill_rows"] == c.data.batch_size // 2
  assert p["flops"] == 2 * rf.prefill_flops(plan.model, c.data.batch_size // 2, c.data.max_prompt_len)
  assert p["xla_flops_per_chip"] * s["chips"] * 2 == pytest.approx(p["flops"], rel=0.35)
  assert s["pieces"]["decode"]["flops"] == pytest.approx(
    2
    * (c.rollout.max_new_tokens - 1)
    * rf.decode_step_flops(plan.model, rows // 2, c.data.max_prompt_len + c.rollout.max_new_tokens)
  )


def test_impossible_config_exits_1_naming_the_piece(tmp_path):
  """Qwen3-32B's published width on one v5e chip (one layer kept so it compiles in seconds)."""
  cmd = [
    sys.executable,
    "-m",
    "maxnorm_jax.plan",
    "--config=configs/default.py:model=qwen3-32b,task=math500",
    "--topology=v5e-1",
    "--json",
    "--config.mesh.fsdp=1",
    "--config.mesh.tensor=1",
    "--config.model.arch.num_hidden_layers=1",
    "--config.data.batch_size=2",
    "--config.data.max_prompt_len=16",
    "--config.rollout.max_new_tokens=8",
    "--config.rollout.group_size=2",
    "--config.train.minibatches=1",
    "--config.train.grad_accum=1",
    "--config.train.logprob_microbatches=1",
  ]
  proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=600)
  assert proc.returncode == 1, proc.stderr[-3000:]
  s = json.loads(proc.stdout)
  assert not s["fits"] and s["chips"] == 1
  assert not s["pieces"]["update"]["fits"]
  assert "piece 'update' does not fit" in proc.stderr
  assert "largest arguments" in proc.stderr
  assert s["param_bytes_per_chip"] == s["param_count"] * 4  # float32, nothing sharded on one chip
