"""Tiny random transformers checkpoints (written by save_pretrained into a pytest tmp dir)."""

import numpy as np
import pytest

VOCAB = 128


def _configs():
  from transformers import Qwen2Config, Qwen3Config, Qwen3MoeConfig

  common = dict(
    vocab_size=VOCAB,
    hidden_size=64,
    intermediate_size=96,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,
    max_position_embeddings=256,
  )
  return {
    "qwen2": Qwen2Config(**common, tie_word_embeddings=False),
    "qwen3": Qwen3Config(
      **common,
      head_dim=16,
      tie_word_embeddings=False,
      rope_parameters={"rope_type": "linear", "factor": 2.0, "rope_theta": 10000.0},
    ),
    "qwen3_tied": Qwen3Config(**common, head_dim=16, tie_word_embeddings=True, attention_bias=True),
    "qwen3_moe": Qwen3MoeConfig(
      **common,
      head_dim=16,
      moe_intermediate_size=32,
      num_experts=4,
      num_experts_per_tok=2,
      norm_topk_prob=True,
      mlp_only_layers=[1],
    ),
  }


@pytest.fixture(scope="session")
def hf_checkpoints(tmp_path_factory):
  """name -> (directory, transformers model in eval mode, float32)."""
  import torch
  from transformers import AutoModelForCausalLM

  out = {}
  for i, (name, cfg) in enumerate(_configs().items()):
    torch.manual_seed(i)
    model = AutoModelForCausalLM.from_config(cfg).eval()
    with torch.no_grad():  # make norms and biases non-trivial
      for p in model.parameters():
        p.add_(0.05 * torch.randn_like(p))
    path = tmp_path_factory.mktemp(name)
    model.save_pretrained(path)
    out[name] = (str(path), model)
  return out


@pytest.fixture(scope="session")
def jax_models(hf_checkpoints):
  """name -> maxnorm_jax Decoder loaded from the transformers checkpoint (float32)."""
  from maxnorm_jax.models import hf

  return {name: hf.load(path) for name, (path, _) in hf_checkpoints.items()}


@pytest.fixture(scope="session")
def padded_batch():
  """input_ids, attention_mask [3, 10]: rows left-padded by 0, 3 and 6 tokens."""
  rng = np.random.RandomState(0)
  ids = rng.randint(1, VOCAB, (3, 10))
  mask = np.ones_like(ids)
  mask[1, :3] = 0
  mask[2, :6] = 0
  ids[mask == 0] = 0
  return ids, mask
