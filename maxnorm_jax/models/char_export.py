"""The built-in `CharTokenizer` as Hugging Face tokenizer files (tokenizer.json, tokenizer_config.json)
that `transformers.AutoTokenizer` loads with the same ids: one token per character (uppercase lowered
by a normalizer, other characters -> <unk>), the four specials as added tokens, decode by concatenation."""

from __future__ import annotations

import json
import os

from maxnorm_jax.data.char_tokenizer import SPECIALS, CharTokenizer


def save_char_tokenizer(tok: CharTokenizer, path: str) -> list[str]:
  """Writes tokenizer.json and tokenizer_config.json of `tok` into `path` -> the files written."""
  from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers

  vocab = {t: i for i, t in enumerate(SPECIALS)}
  vocab.update({c: i + len(SPECIALS) for i, c in enumerate(tok.chars)})
  hf = Tokenizer(models.WordLevel(vocab, unk_token=SPECIALS[tok.unk_id]))
  hf.normalizer = normalizers.Lowercase()
  hf.pre_tokenizer = pre_tokenizers.Split(Regex(r"[\s\S]"), behavior="isolated")
  hf.decoder = decoders.Fuse()
  hf.add_special_tokens(list(SPECIALS))
  os.makedirs(path, exist_ok=True)
  hf.save(os.path.join(path, "tokenizer.json"))
  config = {
    "tokenizer_class": "PreTrainedTokenizerFast",
    "bos_token": tok.bos_token,
    "eos_token": tok.eos_token,
    "pad_token": tok.pad_token,
    "unk_token": SPECIALS[tok.unk_id],
    "add_bos_token": False,
    "clean_up_tokenization_spaces": False,
    "model_max_length": 1_000_000,
  }
  with open(os.path.join(path, "tokenizer_config.json"), "w") as f:
    json.dump(config, f, indent=2)
  return ["tokenizer.json", "tokenizer_config.json"]
