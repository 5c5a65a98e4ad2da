"""Prompt formats: how a record's prompt becomes the text the model sees, and its token ids.

- `PlainFormat(template="{prompt}")`: `template` filled with the record's fields; encoded with the
  tokenizer's own special tokens (e.g. bos) when `add_special_tokens`.
- `ChatFormat(tokenizer, system=None)`: a user turn (after an optional system turn) rendered with
  the tokenizer's chat template and `add_generation_prompt=True`, encoded without added specials
  (the template writes them), as transformers' `apply_chat_template(tokenize=True)` does.
"""

from __future__ import annotations

import dataclasses
import string
from typing import Any, Mapping, Protocol

from maxnorm_jax.data.chat_template import render_chat


class Tokenizer(Protocol):
  """What the data pipeline needs from a tokenizer (`CharTokenizer` and `HFTokenizer` have it)."""

  pad_id: int | None
  chat_template: str | None

  def encode(self, text: str, add_special_tokens: bool = False) -> list[int]: ...

  def special_token_variables(self) -> dict[str, str]: ...


@dataclasses.dataclass(frozen=True)
class PlainFormat:
  """`template` with `{prompt}` (and any other record field) filled in."""

  template: str = "{prompt}"
  add_special_tokens: bool = True

  def __post_init__(self):
    fields = {f for _, f, _, _ in string.Formatter().parse(self.template) if f}
    if "prompt" not in fields:
      raise ValueError(f"data.format.template {self.template!r} must contain {{prompt}}")

  def text(self, record: Mapping[str, Any], tokenizer: Tokenizer) -> str:
    """The formatted prompt text."""
    return self.template.format_map(record)

  def encode(self, record: Mapping[str, Any], tokenizer: Tokenizer) -> tuple[str, list[int]]:
    """(text, ids) of the record's prompt."""
    text = self.text(record, tokenizer)
    return text, tokenizer.encode(text, add_special_tokens=self.add_special_tokens)


@dataclasses.dataclass(frozen=True)
class ChatFormat:
  """A user message (`user_template` filled with the record) under the tokenizer's chat template.

  `template` overrides the tokenizer's chat template; `template_kwargs` are extra template
  variables (e.g. {"enable_thinking": False}).
  """

  system: str | None = None
  user_template: str = "{prompt}"
  template: str | None = None
  template_kwargs: tuple[tuple[str, Any], ...] = ()

  def messages(self, record: Mapping[str, Any]) -> list[dict[str, str]]:
    """The conversation of one record."""
    msgs = [{"role": "system", "content": self.system}] if self.system is not None else []
    return msgs + [{"role": "user", "content": self.user_template.format_map(record)}]

  def text(self, record: Mapping[str, Any], tokenizer: Tokenizer) -> str:
    """The rendered conversation, ending with the assistant's generation prompt."""
    template = self.template if self.template is not None else tokenizer.chat_template
    if template is None:
      raise ValueError(
        "data.format: chat format needs a chat template; the tokenizer has none "
        "(use the plain format or set data.format.template)"
      )
    return render_chat(
      template,
      self.messages(record),
      add_generation_prompt=True,
      special_tokens=tokenizer.special_token_variables(),
      **dict(self.template_kwargs),
    )

  def encode(self, record: Mapping[str, Any], tokenizer: Tokenizer) -> tuple[str, list[int]]:
    """(text, ids) of the record's conversation."""
    text = self.text(record, tokenizer)
    return text, tokenizer.encode(text, add_special_tokens=False)


def make_format(cfg: Mapping[str, Any] | None) -> PlainFormat | ChatFormat:
  """A format from config: {"kind": "plain", "template": ...} or {"kind": "chat", "system": ...}."""
  cfg = dict(cfg or {"kind": "plain"})
  kind = cfg.pop("kind", "plain")
  if kind == "plain":
    return PlainFormat(**cfg)
  if kind == "chat":
    if "template_kwargs" in cfg:
      cfg["template_kwargs"] = tuple(sorted(dict(cfg["template_kwargs"]).items()))
    return ChatFormat(**cfg)
  raise ValueError(f"data.format.kind must be 'plain' or 'chat', got {kind!r}")
