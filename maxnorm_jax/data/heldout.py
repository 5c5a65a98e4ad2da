"""The deterministic held-out split of a file dataset (docs/DESIGN.md §3.8): by a hash of the prompt text.

A prompt is held out when its hash, read as a number u in [0, 1), is below `fraction`; of those,
at most `cap` with the smallest u are kept (the rest stay in training). Whether a prompt is held
out depends on its text alone, so adding rows to a file never moves a prompt from the held-out
set into training, except through the cap. Rows sharing a prompt text share its fate.
"""

from __future__ import annotations

import hashlib
from typing import Iterable


def prompt_hash(prompt: str) -> float:
  """The prompt text's position u in [0, 1) (the first 8 bytes of its SHA-256)."""
  return int.from_bytes(hashlib.sha256(prompt.encode()).digest()[:8], "big") / float(1 << 64)


def heldout_prompts(prompts: Iterable[str], fraction: float, cap: int | None = None) -> list[str]:
  """The held-out prompt texts, smallest hash first.

  prompts: every prompt text of the dataset (duplicates allowed). fraction in [0, 1). cap: most
  prompts to hold out (None: no cap). When no prompt falls below `fraction` (a small file), the one
  with the smallest hash is held out, so a dataset of two or more distinct prompts always has a
  held-out prompt; one distinct prompt cannot be split and raises ValueError.
  """
  if not 0.0 <= fraction < 1.0:
    raise ValueError(f"data.eval_fraction must lie in [0, 1), got {fraction!r}")
  if fraction == 0.0:
    return []
  ranked = sorted({p: prompt_hash(p) for p in prompts}.items(), key=lambda item: (item[1], item[0]))
  if len(ranked) < 2:
    raise ValueError(f"a held-out split needs two or more distinct prompts, the data has {len(ranked)}")
  held = [p for p, u in ranked if u < fraction] or [ranked[0][0]]
  return held[:cap] if cap is not None else held
