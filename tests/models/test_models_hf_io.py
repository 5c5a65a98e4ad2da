"""hf.save / hf.load round trips through transformers, sharded files, dtypes and bad input."""

import json
import os
import shutil

import jax.numpy as jnp
import ml_dtypes
import numpy as np
import pytest
import torch

from maxnorm_jax.models import hf
from maxnorm_jax.models.safetensors_io import SafetensorsFile, write_safetensors


def _logits(model, ids, mask):
  return np.asarray(model(jnp.asarray(ids), jnp.asarray(mask)))


@pytest.mark.parametrize("name", ["qwen2", "qwen3_tied", "qwen3_moe"])
def test_save_then_transformers_and_reload_agree(name, jax_models, padded_batch, tmp_path):
  from transformers import AutoModelForCausalLM

  ids, mask = padded_batch
  model = jax_models[name]
  hf.save(model, str(tmp_path), max_shard_bytes=40_000)  # forces several files + an index
  assert os.path.exists(tmp_path / hf.INDEX_FILE)
  assert len(list(tmp_path.glob("*.safetensors"))) > 1
  expected = _logits(model, ids, mask)
  reloaded = _logits(hf.load(str(tmp_path)), ids, mask)
  np.testing.assert_array_equal(reloaded, expected)
  theirs = AutoModelForCausalLM.from_pretrained(str(tmp_path)).eval()
  with torch.no_grad():
    ref = theirs(torch.tensor(ids), attention_mask=torch.tensor(mask)).logits.numpy()
  assert np.max(np.abs(ref - expected) * mask[..., None]) < 1e-4


def test_bfloat16_load_and_save(hf_checkpoints, jax_models, padded_batch, tmp_path):
  ids, mask = padded_batch
  path, _ = hf_checkpoints["qwen3"]
  model = hf.load(path, dtype="bfloat16", compute_dtype=jnp.float32)
  assert model.embed[...].dtype == jnp.bfloat16
  assert model.layers[0].q[...].dtype == jnp.bfloat16
  got = _logits(model, ids, mask)
  ref = _logits(jax_models["qwen3"], ids, mask)
  assert got.dtype == np.float32
  assert np.max(np.abs(got - ref) * mask[..., None]) < 0.1
  hf.save(model, str(tmp_path))
  st = SafetensorsFile(tmp_path / "model.safetensors")
  assert st.read("model.embed_tokens.weight").dtype == ml_dtypes.bfloat16
  assert json.load(open(tmp_path / "config.json"))["dtype"] == "bfloat16"


def test_safetensors_round_trip(tmp_path):
  a = np.arange(6, dtype=np.float32).reshape(2, 3)
  b = np.array([1.5, -2.0], dtype=ml_dtypes.bfloat16)
  write_safetensors(tmp_path / "x.safetensors", [("a", a), ("b", b)])
  from safetensors.numpy import load_file

  np.testing.assert_array_equal(load_file(tmp_path / "x.safetensors")["a"], a)
  st = SafetensorsFile(tmp_path / "x.safetensors")
  assert st.shape("a") == (2, 3) and sorted(st.keys()) == ["a", "b"]
  np.testing.assert_array_equal(st.read("b").astype(np.float32), [1.5, -2.0])


def _copy(src, dst):
  shutil.copytree(src, dst)
  return str(dst)


def _rewrite(path, drop=None, reshape=None, add=None):
  st = SafetensorsFile(os.path.join(path, "model.safetensors"))
  tensors = {k: np.array(st.read(k)) for k in st.keys()}
  if drop:
    del tensors[drop]
  if reshape:
    tensors[reshape] = tensors[reshape][:-1]
  if add:
    tensors[add] = np.zeros((2,), np.float32)
  del st
  write_safetensors(os.path.join(path, "model.safetensors"), list(tensors.items()))


def test_unknown_architecture_is_named(hf_checkpoints, tmp_path):
  path = _copy(hf_checkpoints["qwen3"][0], tmp_path / "m")
  cfg = json.load(open(os.path.join(path, "config.json")))
  cfg["architectures"] = ["LlamaForCausalLM"]
  json.dump(cfg, open(os.path.join(path, "config.json"), "w"))
  with pytest.raises(ValueError, match="LlamaForCausalLM"):
    hf.load(path)


def test_missing_tensor_is_named(hf_checkpoints, tmp_path):
  path = _copy(hf_checkpoints["qwen3"][0], tmp_path / "m")
  _rewrite(path, drop="model.layers.1.self_attn.k_norm.weight")
  with pytest.raises(ValueError, match=r"'model\.layers\.1\.self_attn\.k_norm\.weight' is missing"):
    hf.load(path)


def test_misshaped_tensor_is_named(hf_checkpoints, tmp_path):
  path = _copy(hf_checkpoints["qwen3_moe"][0], tmp_path / "m")
  _rewrite(path, reshape="model.layers.0.mlp.experts.2.up_proj.weight")
  with pytest.raises(
    ValueError, match=r"'model\.layers\.0\.mlp\.experts\.2\.up_proj\.weight' has shape \(31, 64\), expected \(32, 64\)"
  ):
    hf.load(path)


def test_unused_tensor_is_named(hf_checkpoints, tmp_path):
  path = _copy(hf_checkpoints["qwen2"][0], tmp_path / "m")
  _rewrite(path, add="model.layers.0.self_attn.o_proj.bias")
  with pytest.raises(ValueError, match=r"'model\.layers\.0\.self_attn\.o_proj\.bias'"):
    hf.load(path)
