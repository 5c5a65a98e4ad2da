"""A small built-in character tokenizer for the built-in tasks (no download, vocab < 64).

Ids: 0 pad, 1 bos, 2 eos, 3 unk, then one id per character of `CHARS` (digits, lowercase letters,
space, newline and the punctuation the arithmetic and code tasks use). Uppercase letters are
lowered; any other character encodes as unk. The spelled specials ("<bos>", "<eos>", "<pad>",
"<unk>") encode as their ids, as a Hugging Face tokenizer treats its added tokens, so a chat
template writing `{{ bos_token }}` gives the bos id.
"""

from __future__ import annotations

import re
from typing import Iterable, Sequence

SPECIALS = ("<pad>", "<bos>", "<eos>", "<unk>")
_SPECIAL_RE = re.compile("(" + "|".join(re.escape(t) for t in SPECIALS) + ")")
CHARS = "0123456789abcdefghijklmnopqrstuvwxyz \n+-*/=()[]:.,_'\"<>%!?#"


class CharTokenizer:
  """Character-level tokenizer: `encode(text) -> list[int]`, `decode(ids) -> str`."""

  pad_id = 0
  bos_id = 1
  eos_id = 2
  unk_id = 3

  def __init__(self, chars: str = CHARS):
    if len(set(chars)) != len(chars):
      raise ValueError("CharTokenizer: duplicate characters in the alphabet")
    self.chars = chars
    self._to_id = {c: i + len(SPECIALS) for i, c in enumerate(chars)}
    self._to_char = {i: c for c, i in self._to_id.items()}

  @property
  def vocab_size(self) -> int:
    """Number of ids (specials + characters)."""
    return len(SPECIALS) + len(self.chars)

  @property
  def eos_ids(self) -> tuple[int, ...]:
    """Every id that ends a completion."""
    return (self.eos_id,)

  @property
  def bos_token(self) -> str:
    return SPECIALS[self.bos_id]

  @property
  def eos_token(self) -> str:
    return SPECIALS[self.eos_id]

  @property
  def pad_token(self) -> str:
    return SPECIALS[self.pad_id]

  chat_template = None

  def special_token_variables(self) -> dict[str, str]:
    """The special tokens as chat-template variables."""
    return {
      "bos_token": self.bos_token,
      "eos_token": self.eos_token,
      "pad_token": self.pad_token,
      "unk_token": SPECIALS[self.unk_id],
    }

  def encode(self, text: str, add_special_tokens: bool = False) -> list[int]:
    """Ids of `text`, one per character (uppercase lowered, unknown characters -> unk, spelled
    specials -> their ids); `add_special_tokens` puts bos in front."""
    ids: list[int] = []
    for i, part in enumerate(_SPECIAL_RE.split(text)):
      if i % 2:  # a spelled special token
        ids.append(SPECIALS.index(part))
      else:
        ids.extend(self._to_id.get(c, self._to_id.get(c.lower(), self.unk_id)) for c in part)
    return ([self.bos_id] if add_special_tokens else []) + ids

  def decode(self, ids: Iterable[int], skip_special_tokens: bool = True) -> str:
    """Text of `ids` (callers cut at eos); special ids are dropped, or spelled when not skipped."""
    out = []
    for i in ids:
      i = int(i)
      if i in self._to_char:
        out.append(self._to_char[i])
      elif 0 <= i < len(SPECIALS):
        if not skip_special_tokens:
          out.append(SPECIALS[i])
      else:
        raise ValueError(f"CharTokenizer: id {i} is outside the vocabulary of {self.vocab_size}")
    return "".join(out)

  def decode_batch(self, batch: Sequence[Iterable[int]], skip_special_tokens: bool = True) -> list[str]:
    """`decode` of each row."""
    return [self.decode(ids, skip_special_tokens) for ids in batch]
