"""Pulling the final answer out of a completion: the last `\\boxed{}` or the last integer."""

from __future__ import annotations

import re

_BRACE_OR_BOXED = re.compile(r"\\(?:boxed|fbox)\s*\{|[{}]")
_INT = re.compile(r"-?\d+")


def last_boxed(text: str) -> str | None:
  """The content of the last complete `\\boxed{...}` (or `\\fbox{...}`), braces balanced; else None.

  "Last" is by where the `\\boxed{` starts (so the inner one of nested boxes wins). One pass with a
  stack of open braces: linear in the text (scanning forward from every `\\boxed{` was quadratic).
  """
  stack: list[int] = []  # per open brace: where its box's content starts, or -1 for a plain brace
  best_start, found = -1, None
  for m in _BRACE_OR_BOXED.finditer(text):
    token = m.group()
    if token == "}":
      if stack:
        start = stack.pop()
        if start > best_start:
          best_start, found = start, text[start : m.start()]
    elif token == "{":
      stack.append(-1)
    else:
      stack.append(m.end())
  return found


def last_integer(text: str) -> str | None:
  """The last match of the regex -?\\d+ in `text` (as written, sign included); else None."""
  matches = _INT.findall(text)
  return matches[-1] if matches else None


def integer_answer(text: str) -> tuple[str | None, str]:
  """The answer of a built-in arithmetic completion and where it came from.

  The content of the last `\\boxed{}` if there is one (spaces and thousands commas removed; it
  counts only if it is an integer literal, so "\\boxed{3.5}" never matches 5), else the last
  integer of the whole text. Returns (answer or None, source), source in {"boxed",
  "last_integer", "none"}.
  """
  boxed = last_boxed(text)
  if boxed is not None:
    return boxed.strip().replace(",", "").replace(" ", ""), "boxed"
  value = last_integer(text)
  return value, ("last_integer" if value is not None else "none")
