"""The decoder's activations stay sharded by rows on an FSDP mesh (models.layers.ACTIVATION_AXES),
and rematerialised layers run as one scan.

Left to itself, the compiler followed the FSDP-sharded weights and kept every row of [B,T,F] MLP
hiddens on every chip (PLAN.md: Qwen2.5-3B's update needed 104.6 GiB a chip); these tests read the
compiled programs' buffer shapes.
"""

import re

import jax
import jax.numpy as jnp
import numpy as np

from maxnorm_jax.models import ModelConfig, create_model
from maxnorm_jax.models.decoder import hidden_states
from maxnorm_jax.parallel import DEFAULT_RULES, make_mesh
from maxnorm_jax.parallel.sharding import rows_array
from maxnorm_jax.train import step as step_lib

B, L, N = 16, 4, 12  # rows, prompt and completion tokens
F = 96  # the MLP width: no other dimension of the model has this size
CFG = ModelConfig.tiny(vocab_size=128, hidden_size=64, intermediate_size=F, remat=True)


def _mlp_hidden_rows(hlo_text: str) -> set[int]:
  """Leading dimensions of every [R, T, F] array of the compiled (per-device) program."""
  return {int(r) for r in re.findall(rf"\[(\d+),{L + N},{F}\]", hlo_text)}


def _inputs(mesh):
  rng = np.random.RandomState(0)
  ids = rows_array(rng.randint(0, 128, (B, L)).astype(np.int32), mesh, DEFAULT_RULES)
  pmask = rows_array(np.ones((B, L), bool), mesh, DEFAULT_RULES)
  tokens = rows_array(rng.randint(0, 128, (B, N)).astype(np.int32), mesh, DEFAULT_RULES)
  tmask = rows_array(np.ones((B, N), bool), mesh, DEFAULT_RULES)
  return ids, pmask, tokens, tmask


def test_update_gradient_keeps_rows_on_their_devices():
  mesh = make_mesh({"fsdp": 8})
  params = create_model(CFG, mesh, seed=0).weights()

  def loss(p, ids, pmask, tokens, tmask, pin):
    logp, _, _ = step_lib.completion_pass(
      CFG, 1.0, p, ids, pmask, tokens, tmask, mesh=mesh if pin else None, rules=DEFAULT_RULES
    )
    return jnp.sum(logp)

  args = (params, *_inputs(mesh))
  pinned = jax.jit(jax.grad(loss), static_argnums=5).lower(*args, True).compile()
  assert _mlp_hidden_rows(pinned.as_text()) == {B // 8}
  # The same gradient as without the pins (the layout changes, the numbers do not).
  unpinned = jax.jit(jax.grad(loss), static_argnums=5)(*args, False)
  for a, b in zip(jax.tree.leaves(pinned(*args)), jax.tree.leaves(unpinned)):
    np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=2e-4, atol=2e-6)


def test_logprob_pass_keeps_rows_on_their_devices():
  mesh = make_mesh({"fsdp": 8})
  params = create_model(CFG, mesh, seed=0).weights()
  lowered = step_lib.sequence_logprobs.lower(CFG, 1.0, params, *_inputs(mesh), 1, mesh=mesh, rules=DEFAULT_RULES)
  assert _mlp_hidden_rows(lowered.compile().as_text()) == {B // 8}


def test_rematerialised_layers_run_as_one_scan():
  """With remat, the layers are one scan over stacked weights (its backward holds one layer's
  activations); without, the layers are unrolled."""
  cfg = CFG.replace(num_layers=3)
  params = create_model(cfg, seed=0).weights()
  ids = jnp.zeros((2, 8), jnp.int32)

  def scans(c):
    jaxpr = jax.make_jaxpr(lambda p: hidden_states(c, p, ids)[0])(params)
    return [e.params["length"] for e in jaxpr.jaxpr.eqns if e.primitive.name == "scan"]

  assert scans(cfg) == [3]
  assert scans(cfg.replace(remat=False)) == []
