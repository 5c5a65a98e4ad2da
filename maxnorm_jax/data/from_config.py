"""Building the prompt pipeline and tokenizer from a config (an ml_collections ConfigDict or a dict).

    data = dict(source="builtin:arith", tokenizer="char", fields=None, format={"kind": "plain"},
                batch_size=8, seed=0, num_epochs=None, skip_bad_rows=False, max_prompt_len=32,
                split="train", builtin_n=None, shuffle=True, drop_remainder=True)
    tok = tokenizer_from_config(data); it = pipeline_from_config(data, tok)

`tokenizer` is "char" or a checkpoint directory; `fields` a preset name, a dict or None; `format`
a `make_format` dict. Unknown keys raise, naming the key.
"""

from __future__ import annotations

from typing import Any, Mapping

from maxnorm_jax.data.char_tokenizer import CharTokenizer
from maxnorm_jax.data.formatting import Tokenizer, make_format
from maxnorm_jax.data.hf_tokenizer import HFTokenizer, load_tokenizer
from maxnorm_jax.data.pipeline import PromptIterator, build_pipeline

PIPELINE_KEYS = (
  "source",
  "fields",
  "format",
  "batch_size",
  "seed",
  "num_epochs",
  "skip_bad_rows",
  "max_prompt_len",
  "split",
  "builtin_n",
  "shuffle",
  "drop_remainder",
  "shard_index",
  "shard_count",
)
OTHER_KEYS = ("tokenizer",)


def _plain(cfg: Any) -> Any:
  """A ConfigDict (or nested ones) as plain dicts; other values unchanged."""
  if hasattr(cfg, "to_dict"):
    return cfg.to_dict()
  if isinstance(cfg, Mapping):
    return {k: _plain(v) for k, v in cfg.items()}
  return cfg


def tokenizer_from_config(cfg: Mapping[str, Any], prefix: str = "data") -> CharTokenizer | HFTokenizer:
  """The tokenizer named by `cfg["tokenizer"]` ("char", the default, or a checkpoint directory)."""
  spec = _plain(cfg).get("tokenizer", "char")
  if not isinstance(spec, str):
    raise TypeError(f"{prefix}.tokenizer must be 'char' or a checkpoint directory, got {spec!r}")
  return load_tokenizer(spec)


def pipeline_from_config(
  cfg: Mapping[str, Any], tokenizer: Tokenizer, prefix: str = "data", **overrides: Any
) -> PromptIterator:
  """`build_pipeline` with the arguments of `cfg` (see the module docstring); `overrides` win."""
  cfg = {**_plain(cfg), **overrides}
  unknown = sorted(set(cfg) - set(PIPELINE_KEYS) - set(OTHER_KEYS))
  if unknown:
    raise KeyError(f"{prefix}: unknown keys {unknown}; known: {sorted(PIPELINE_KEYS + OTHER_KEYS)}")
  for key in ("source", "batch_size"):
    if cfg.get(key) is None:
      raise KeyError(f"{prefix}.{key} must be set")
  kwargs = {k: v for k, v in cfg.items() if k in PIPELINE_KEYS and k not in ("format",)}
  kwargs["prompt_format"] = make_format(cfg.get("format"))
  return build_pipeline(tokenizer=tokenizer, **kwargs)
