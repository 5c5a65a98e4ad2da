"""Chat templates from a checkpoint, rendered with jinja2 the way transformers renders them.

transformers (`utils/chat_template_utils.py`) compiles a template in an
`ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)` with the `loopcontrols`
extension, a `{% generation %}` block tag, the globals `raise_exception`, `strftime_now`, `dict`,
`namespace` and its own `tojson` filter (no HTML escaping, `ensure_ascii=False`), and renders with
`messages`, `tools`, `documents`, `add_generation_prompt` and the special tokens (`bos_token`,
`eos_token`, ...) as variables. This module does the same without importing transformers.
"""

from __future__ import annotations

import functools
import json
import os
from datetime import datetime
from typing import Any, Mapping, Sequence

import jinja2
import jinja2.ext
import jinja2.nodes
from jinja2.sandbox import ImmutableSandboxedEnvironment

CHAT_TEMPLATE_FILE = "chat_template.jinja"
TOKENIZER_CONFIG_FILE = "tokenizer_config.json"


class _GenerationBlock(jinja2.ext.Extension):
  """`{% generation %}...{% endgeneration %}`: renders its body (transformers tracks its span)."""

  tags = {"generation"}

  def parse(self, parser):
    lineno = next(parser.stream).lineno
    body = parser.parse_statements(("name:endgeneration",), drop_needle=True)
    return jinja2.nodes.CallBlock(self.call_method("_render"), [], [], body).set_lineno(lineno)

  def _render(self, caller):
    return caller()


def _raise_exception(message: str):
  raise jinja2.exceptions.TemplateError(message)


def _tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
  return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)


def _strftime_now(fmt: str) -> str:
  return datetime.now().strftime(fmt)


class _TemplateDict:
  """`dict(...)` inside a template, without attribute access to the type."""

  def __call__(self, *args, **kwargs):
    return dict(*args, **kwargs)

  def fromkeys(self, *args, **kwargs):
    return dict.fromkeys(*args, **kwargs)


class _TemplateNamespace(jinja2.utils.Namespace):
  """jinja2's `namespace` refusing underscore-prefixed attributes, as transformers does."""

  def __init__(*args, **kwargs):  # noqa: N805 (jinja's own signature trick)
    self, args = args[0], args[1:]
    attrs = dict(*args, **kwargs)
    for name in attrs:
      _TemplateNamespace._check_name(name)
    jinja2.utils.Namespace.__init__(self, attrs)

  def __setitem__(self, name, value):
    _TemplateNamespace._check_name(name)
    jinja2.utils.Namespace.__setitem__(self, name, value)

  @staticmethod
  def _check_name(name):
    if isinstance(name, str) and name.startswith("_"):
      raise jinja2.exceptions.SecurityError(
        f"chat templates cannot store underscore-prefixed attributes on a namespace, got {name!r}"
      )


@functools.lru_cache(maxsize=32)
def compile_chat_template(source: str) -> jinja2.Template:
  """The compiled template, in transformers' sandboxed environment (cached by source text)."""
  env = ImmutableSandboxedEnvironment(
    trim_blocks=True, lstrip_blocks=True, extensions=[_GenerationBlock, jinja2.ext.loopcontrols]
  )
  env.filters["tojson"] = _tojson
  env.globals["raise_exception"] = _raise_exception
  env.globals["strftime_now"] = _strftime_now
  env.globals["dict"] = _TemplateDict()
  env.globals["namespace"] = _TemplateNamespace
  return env.from_string(source)


def render_chat(
  template: str,
  messages: Sequence[Mapping[str, Any]],
  *,
  add_generation_prompt: bool = True,
  special_tokens: Mapping[str, str] | None = None,
  tools: Sequence[Mapping] | None = None,
  documents: Sequence[Mapping] | None = None,
  **kwargs: Any,
) -> str:
  """The text of `messages` under `template`, as `tokenizer.apply_chat_template(..., tokenize=False)`.

  `special_tokens` (bos_token, eos_token, pad_token, ...) become template variables; `kwargs`
  override them (e.g. `enable_thinking=False`). Messages with a None value drop that key, as
  transformers normalises them.
  """
  if not messages:
    raise ValueError("render_chat: cannot apply a chat template to an empty conversation")
  chat = [{k: v for k, v in dict(m).items() if v is not None} for m in messages]
  variables = {**(special_tokens or {}), **kwargs}
  return compile_chat_template(template).render(
    messages=chat, tools=tools, documents=documents, add_generation_prompt=add_generation_prompt, **variables
  )


def load_chat_template(checkpoint_dir: str, name: str = "default") -> str | None:
  """The chat template of a checkpoint: `chat_template.jinja`, else `tokenizer_config.json`'s
  `chat_template` (a string, or a list of {name, template} where `name` picks one). None if absent."""
  path = os.path.join(checkpoint_dir, CHAT_TEMPLATE_FILE)
  if os.path.exists(path):
    with open(path, encoding="utf-8") as f:
      return f.read()
  cfg_path = os.path.join(checkpoint_dir, TOKENIZER_CONFIG_FILE)
  if not os.path.exists(cfg_path):
    return None
  with open(cfg_path, encoding="utf-8") as f:
    template = json.load(f).get("chat_template")
  if template is None or isinstance(template, str):
    return template
  if isinstance(template, list):
    by_name = {t["name"]: t["template"] for t in template}
    if name not in by_name:
      raise KeyError(f"{cfg_path}: chat_template has no template named {name!r}; has {sorted(by_name)}")
    return by_name[name]
  raise TypeError(f"{cfg_path}: chat_template must be a string or a list, got {type(template).__name__}")
