"""Data: the grain prompt pipeline, built-in tasks, tokenizers and chat templates.

from maxnorm_jax.data import build_pipeline, CharTokenizer, load_tokenizer, tasks
it = build_pipeline("builtin:arith", tokenizer=CharTokenizer(), batch_size=8, seed=0)
batch = next(it); state = it.get_state(); it.set_state(state)
tasks.make("arith", "test", seed=0, n=100)          # held-out records
"""

from maxnorm_jax.data import tasks
from maxnorm_jax.data.char_tokenizer import CharTokenizer
from maxnorm_jax.data.chat_template import compile_chat_template, load_chat_template, render_chat
from maxnorm_jax.data.formatting import ChatFormat, PlainFormat, make_format
from maxnorm_jax.data.from_config import pipeline_from_config, tokenizer_from_config
from maxnorm_jax.data.hf_tokenizer import HFTokenizer, load_tokenizer
from maxnorm_jax.data.pipeline import PromptIterator, build_pipeline, collate, load_records
from maxnorm_jax.data.presets import FIELD_PRESETS, SAMPLE_FILES, field_map
from maxnorm_jax.data.records import BadRowError, FieldMap, validate_row
from maxnorm_jax.data.special_tokens import SpecialTokens, load_special_tokens

__all__ = [
  "BadRowError",
  "CharTokenizer",
  "ChatFormat",
  "FIELD_PRESETS",
  "FieldMap",
  "HFTokenizer",
  "PlainFormat",
  "PromptIterator",
  "SAMPLE_FILES",
  "SpecialTokens",
  "build_pipeline",
  "collate",
  "compile_chat_template",
  "field_map",
  "load_chat_template",
  "load_records",
  "load_special_tokens",
  "load_tokenizer",
  "make_format",
  "pipeline_from_config",
  "render_chat",
  "tasks",
  "tokenizer_from_config",
  "validate_row",
]
