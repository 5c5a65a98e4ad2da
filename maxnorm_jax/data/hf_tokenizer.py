"""Hugging Face tokenizers (`tokenizer.json` through the `tokenizers` package) with the checkpoint's
special tokens and chat template, and `load_tokenizer`, which also gives the built-in char tokenizer.
"""

from __future__ import annotations

import os
from typing import Any, Iterable, Mapping, Sequence

import tokenizers

from maxnorm_jax.data.char_tokenizer import CharTokenizer
from maxnorm_jax.data.chat_template import load_chat_template, render_chat
from maxnorm_jax.data.special_tokens import SpecialTokens, load_special_tokens

TOKENIZER_FILE = "tokenizer.json"


class HFTokenizer:
  """A `tokenizers.Tokenizer` with the ids a sampler needs and the chat template of its checkpoint."""

  def __init__(self, tokenizer: tokenizers.Tokenizer, special: SpecialTokens, chat_template: str | None = None):
    self.tokenizer = tokenizer
    self.special = special
    self.chat_template = chat_template

  @classmethod
  def from_dir(cls, checkpoint_dir: str, chat_template_name: str = "default") -> "HFTokenizer":
    """Loads `tokenizer.json`, the special tokens and the chat template of a checkpoint directory."""
    path = os.path.join(checkpoint_dir, TOKENIZER_FILE)
    if not os.path.exists(path):
      raise FileNotFoundError(f"{path}: no tokenizer.json in the checkpoint directory")
    tok = tokenizers.Tokenizer.from_file(path)
    special = load_special_tokens(checkpoint_dir, tok.token_to_id)
    return cls(tok, special, load_chat_template(checkpoint_dir, chat_template_name))

  @property
  def vocab_size(self) -> int:
    """Number of ids, added tokens included."""
    return self.tokenizer.get_vocab_size(with_added_tokens=True)

  @property
  def bos_id(self) -> int | None:
    return self.special.bos_id

  @property
  def eos_id(self) -> int | None:
    return self.special.eos_id

  @property
  def pad_id(self) -> int | None:
    return self.special.pad_id

  @property
  def eos_ids(self) -> tuple[int, ...]:
    """Every id that ends a completion (tokenizer, generation_config.json and config.json)."""
    return self.special.eos_ids

  def special_token_variables(self) -> dict[str, str]:
    """The special tokens as chat-template variables."""
    return self.special.template_variables()

  def encode(self, text: str, add_special_tokens: bool = False) -> list[int]:
    """Ids of `text`; `add_special_tokens` runs the tokenizer's post-processor (e.g. adds bos)."""
    return self.tokenizer.encode(text, add_special_tokens=add_special_tokens).ids

  def decode(self, ids: Iterable[int], skip_special_tokens: bool = True) -> str:
    """Text of `ids`."""
    return self.tokenizer.decode([int(i) for i in ids], skip_special_tokens=skip_special_tokens)

  def decode_batch(self, batch: Sequence[Iterable[int]], skip_special_tokens: bool = True) -> list[str]:
    """`decode` of each row."""
    return self.tokenizer.decode_batch(
      [[int(i) for i in ids] for ids in batch], skip_special_tokens=skip_special_tokens
    )

  def apply_chat_template(
    self,
    messages: Sequence[Mapping[str, Any]],
    add_generation_prompt: bool = True,
    tokenize: bool = False,
    **kwargs: Any,
  ) -> str | list[int]:
    """The chat rendered as transformers renders it; with `tokenize`, its ids (no added specials)."""
    if self.chat_template is None:
      raise ValueError(
        "this tokenizer's checkpoint has no chat template (chat_template.jinja or tokenizer_config.json: chat_template)"
      )
    text = render_chat(
      self.chat_template,
      messages,
      add_generation_prompt=add_generation_prompt,
      special_tokens=self.special_token_variables(),
      **kwargs,
    )
    return self.encode(text) if tokenize else text


def load_tokenizer(spec: str) -> HFTokenizer | CharTokenizer:
  """ "char" -> the built-in `CharTokenizer`; a checkpoint directory -> `HFTokenizer.from_dir`."""
  if spec == "char":
    return CharTokenizer()
  return HFTokenizer.from_dir(spec)
