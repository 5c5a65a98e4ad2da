"""Logit parity with transformers, MoE load-balancing loss, greedy decoding equal to transformers."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch

from maxnorm_jax.sampling import generate

NAMES = ["qwen2", "qwen3", "qwen3_tied", "qwen3_moe"]


def _torch_logits(model, ids, mask, **kw):
  with torch.no_grad():
    return model(torch.tensor(ids), attention_mask=torch.tensor(mask), **kw)


@pytest.mark.parametrize("name", NAMES)
def test_logits_match_transformers(name, hf_checkpoints, jax_models, padded_batch):
  ids, mask = padded_batch
  ref = _torch_logits(hf_checkpoints[name][1], ids, mask).logits.numpy()
  got = np.asarray(jax_models[name](jnp.asarray(ids), jnp.asarray(mask)))
  assert got.shape == (3, 10, 128)
  err = np.max(np.abs(got - ref) * mask[..., None])
  print(f"{name}: max abs logit diff {err:.3g}")
  assert err < 1e-4


def test_config_read_from_checkpoints(jax_models):
  assert jax_models["qwen2"].config.qkv_bias and not jax_models["qwen2"].config.qk_norm
  assert jax_models["qwen3"].config.rope_scaling_factor == 2.0
  assert jax_models["qwen3_tied"].config.tie_word_embeddings and jax_models["qwen3_tied"].config.o_bias
  moe = jax_models["qwen3_moe"].config
  assert (moe.num_experts, moe.num_experts_per_tok, moe.mlp_only_layers) == (4, 2, (1,))
  assert moe.is_moe_layer(0) and not moe.is_moe_layer(1)
  assert not hasattr(jax_models["qwen3_tied"], "lm_head")


def test_moe_load_balancing_loss_matches_transformers(hf_checkpoints, jax_models, padded_batch):
  ids, mask = padded_batch
  ref = _torch_logits(hf_checkpoints["qwen3_moe"][1], ids, mask, output_router_logits=True).aux_loss.item()
  _, aux = jax_models["qwen3_moe"].forward_with_aux(jnp.asarray(ids), jnp.asarray(mask))
  assert abs(float(aux["load_balancing_loss"]) - ref) < 1e-5
  _, dense_aux = jax_models["qwen3"].forward_with_aux(jnp.asarray(ids), jnp.asarray(mask))
  assert float(dense_aux["load_balancing_loss"]) == 0.0


@pytest.mark.parametrize("name", NAMES)
def test_greedy_decoding_equals_transformers_generate(name, hf_checkpoints, jax_models, padded_batch):
  ids, mask = padded_batch
  model = hf_checkpoints[name][1]
  model.generation_config.eos_token_id = None
  model.generation_config.pad_token_id = 0
  with torch.no_grad():
    ref = model.generate(torch.tensor(ids), attention_mask=torch.tensor(mask), max_new_tokens=8, do_sample=False)[
      :, ids.shape[1] :
    ].numpy()
  out = generate(jax_models[name], ids, mask, jax.random.key(0), 8, temperature=0.0)
  np.testing.assert_array_equal(np.asarray(out.tokens), ref)
  assert np.asarray(out.mask).all() and np.asarray(out.truncated).all()
  np.testing.assert_array_equal(np.asarray(out.lengths), [8, 8, 8])


def test_logprob_pass_reports_the_load_balancing_loss(jax_models, padded_batch):
  from maxnorm_jax.models import next_token_targets, token_logprobs

  ids, mask = (jnp.asarray(a) for a in padded_batch)
  model = jax_models["qwen3_moe"]
  targets, tmask = next_token_targets(ids, mask)
  out = token_logprobs(model, ids, targets, tmask, attention_mask=mask, chunk_size=8)
  _, aux = model.forward_with_aux(ids, mask)
  assert abs(float(out.load_balancing_loss) - float(aux["load_balancing_loss"])) < 1e-6
  assert float(out.load_balancing_loss) > 0


def test_bfloat16_compute_keeps_float32_logits(hf_checkpoints, jax_models, padded_batch):
  from maxnorm_jax.models import hf

  ids, mask = (jnp.asarray(a) for a in padded_batch)
  model = hf.load(hf_checkpoints["qwen3_moe"][0], dtype="bfloat16")
  assert model.config.dtype == "bfloat16" and model.config.logits_fp32
  logits = model(ids, mask)
  assert logits.dtype == jnp.float32
  ref = jax_models["qwen3_moe"](ids, mask)
  err = float(jnp.max(jnp.abs(logits - ref) * mask[..., None]))
  assert 0 < err < 0.25, err
