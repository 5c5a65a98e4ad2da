"""Writes the peer benchmarks' checkpoint: a seeded random Qwen3 decoder as a Hugging Face directory
that transformers, vLLM and TRL load (config.json, model.safetensors, generation_config.json, and the
built-in character tokenizer as tokenizer.json, as `python -m maxnorm_jax.export` writes it).

    python benchmarks/peers/make_checkpoint.py [--out runs/bench_ckpt] [--seed 0]

The shape is issue 11's: 4 layers, width 256, 4 heads / 2 kv heads of 64, mlp 768, tied embeddings,
vocab 64: the built-in character tokenizer's 63 ids plus "~", so that every id a model samples decodes.
Runs in the project's environment.
"""

import argparse
import json
import os

SHAPE = dict(
  vocab_size=64,
  hidden_size=256,
  intermediate_size=768,
  num_layers=4,
  num_heads=4,
  num_kv_heads=2,
  head_dim=64,
  max_position_embeddings=2048,
)


def make_checkpoint(out: str, seed: int = 0) -> dict:
  """Writes the checkpoint directory `out` -> its config.json dict."""
  from maxnorm_jax.data import CharTokenizer
  from maxnorm_jax.data.char_tokenizer import CHARS
  from maxnorm_jax.models import hf
  from maxnorm_jax.models.char_export import save_char_tokenizer
  from maxnorm_jax.models.config import ModelConfig
  from maxnorm_jax.models.create import create_model

  cfg = ModelConfig.tiny(param_dtype="float32", dtype="float32", **SHAPE)
  tok = CharTokenizer(CHARS + "~")
  if tok.vocab_size != cfg.vocab_size:
    raise ValueError(f"the tokenizer has {tok.vocab_size} ids, the model {cfg.vocab_size}")
  hf.save(create_model(cfg, seed=seed), out)
  ids = {"bos_token_id": tok.bos_id, "eos_token_id": tok.eos_id, "pad_token_id": tok.pad_id}
  path = os.path.join(out, "config.json")
  with open(path) as f:
    config = json.load(f)
  config.update(ids)
  with open(path, "w") as f:
    json.dump(config, f, indent=2)
  with open(os.path.join(out, "generation_config.json"), "w") as f:
    json.dump(ids, f, indent=2)
  save_char_tokenizer(tok, out)
  return config


def main():
  parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
  parser.add_argument("--out", default="runs/bench_ckpt")
  parser.add_argument("--seed", type=int, default=0)
  args = parser.parse_args()
  config = make_checkpoint(args.out, args.seed)
  print(
    f"{args.out}: {config['architectures'][0]}, {config['num_hidden_layers']} layers, width {config['hidden_size']}"
  )


if __name__ == "__main__":
  main()
