"""Special tokens and EOS ids of a checkpoint, from its tokenizer_config.json, special_tokens_map.json,
generation_config.json and config.json.

Precedence: token strings come from tokenizer_config.json (then special_tokens_map.json); ids are
those strings' ids in the tokenizer. EOS ids are the union, in this order, of the tokenizer's eos
token, generation_config.json's `eos_token_id` (an int or a list) and config.json's. bos/pad ids
fall back to generation_config.json, then config.json; pad falls back to eos at last.
"""

from __future__ import annotations

import dataclasses
import json
import os
from typing import Any, Callable

TOKEN_NAMES = ("bos_token", "eos_token", "unk_token", "sep_token", "pad_token", "cls_token", "mask_token")


@dataclasses.dataclass(frozen=True)
class SpecialTokens:
  """Named special token strings and the ids a sampler needs."""

  tokens: dict[str, str]  # e.g. {"eos_token": "<|im_end|>", "pad_token": "<|endoftext|>"}
  bos_id: int | None
  eos_id: int | None
  pad_id: int | None
  eos_ids: tuple[int, ...]

  def template_variables(self) -> dict[str, str]:
    """The token strings a chat template reads (bos_token, eos_token, ...)."""
    return dict(self.tokens)


def _read_json(path: str) -> dict[str, Any]:
  if not os.path.exists(path):
    return {}
  with open(path, encoding="utf-8") as f:
    try:
      data = json.load(f)
    except json.JSONDecodeError as e:
      raise ValueError(f"{path}:{e.lineno}: invalid JSON: {e.msg}") from None
  if not isinstance(data, dict):
    raise ValueError(f"{path}: expected a JSON object")
  return data


def _token_text(value: Any, where: str) -> str | None:
  if value is None or isinstance(value, str):
    return value
  if isinstance(value, dict) and isinstance(value.get("content"), str):
    return value["content"]  # a serialised AddedToken
  raise ValueError(f"{where}: a special token must be a string or {{'content': str}}, got {value!r}")


def _ids(value: Any, where: str) -> list[int]:
  if value is None:
    return []
  if isinstance(value, bool):
    raise ValueError(f"{where}: expected an int or a list of ints, got {value!r}")
  if isinstance(value, int):
    return [value]
  if isinstance(value, list) and all(isinstance(v, int) and not isinstance(v, bool) for v in value):
    return list(value)
  raise ValueError(f"{where}: expected an int or a list of ints, got {value!r}")


def load_special_tokens(checkpoint_dir: str, token_to_id: Callable[[str], int | None]) -> SpecialTokens:
  """The special tokens of the checkpoint in `checkpoint_dir`; `token_to_id` maps a token to its id."""
  tok_cfg_path = os.path.join(checkpoint_dir, "tokenizer_config.json")
  stm_path = os.path.join(checkpoint_dir, "special_tokens_map.json")
  gen_path = os.path.join(checkpoint_dir, "generation_config.json")
  cfg_path = os.path.join(checkpoint_dir, "config.json")
  tok_cfg, stm, gen, cfg = (_read_json(p) for p in (tok_cfg_path, stm_path, gen_path, cfg_path))

  tokens: dict[str, str] = {}
  for name in TOKEN_NAMES:
    text = _token_text(tok_cfg.get(name), f"{tok_cfg_path}: {name}")
    if text is None:
      text = _token_text(stm.get(name), f"{stm_path}: {name}")
    if text is not None:
      tokens[name] = text

  def id_of(name: str) -> int | None:
    if name not in tokens:
      return None
    i = token_to_id(tokens[name])
    if i is None:
      raise ValueError(f"{checkpoint_dir}: {name} {tokens[name]!r} is not in the tokenizer's vocabulary")
    return int(i)

  def first(*candidates: list[int]) -> int | None:
    for c in candidates:
      if c:
        return c[0]
    return None

  eos_ids: list[int] = []
  tok_eos = id_of("eos_token")
  for i in (
    ([tok_eos] if tok_eos is not None else [])
    + _ids(gen.get("eos_token_id"), f"{gen_path}: eos_token_id")
    + _ids(cfg.get("eos_token_id"), f"{cfg_path}: eos_token_id")
  ):
    if i not in eos_ids:
      eos_ids.append(i)
  bos = id_of("bos_token")
  if bos is None:
    bos = first(
      _ids(gen.get("bos_token_id"), f"{gen_path}: bos_token_id"),
      _ids(cfg.get("bos_token_id"), f"{cfg_path}: bos_token_id"),
    )
  eos = eos_ids[0] if eos_ids else None
  pad = id_of("pad_token")
  if pad is None:
    pad = first(
      _ids(gen.get("pad_token_id"), f"{gen_path}: pad_token_id"),
      _ids(cfg.get("pad_token_id"), f"{cfg_path}: pad_token_id"),
    )
  if pad is None:
    pad = eos
  return SpecialTokens(tokens=tokens, bos_id=bos, eos_id=eos, pad_id=pad, eos_ids=tuple(eos_ids))
