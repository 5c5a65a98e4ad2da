"""Host side of a rollout: global arrays from host batches, the local rows a process verifies,
DAPO's overlong shaping, and the group selection of the filters.

Every process holds the same global prompt batch (prompts are small), so a global array is built
from it without communication; completions are read back only from the rows this process's devices
hold, scored there, and the rewards (tiny) are gathered across processes.
"""

from __future__ import annotations

from typing import Sequence

import jax
import numpy as np


def local_rows(x: jax.Array) -> tuple[np.ndarray, np.ndarray]:
  """(values, row indices) of the rows of a row-sharded global array held by this process."""
  seen: dict[int, np.ndarray] = {}
  for shard in x.addressable_shards:
    rows = shard.index[0] if shard.index else slice(None)
    start, stop, _ = rows.indices(x.shape[0])
    if start not in seen:
      seen[start] = (np.arange(start, stop), np.asarray(shard.data))
  order = sorted(seen)
  idx = np.concatenate([seen[s][0] for s in order])
  values = np.concatenate([seen[s][1] for s in order], axis=0)
  return values, idx


def gather_rows(values: np.ndarray, idx: np.ndarray, total: int) -> np.ndarray:
  """The full [total, ...] host array from every process's (values, row indices)."""
  values = np.asarray(values)
  if jax.process_count() == 1:
    out = np.empty((total,) + values.shape[1:], values.dtype)
    out[idx] = values
    return out
  from jax.experimental import multihost_utils

  all_idx = np.asarray(multihost_utils.process_allgather(idx.astype(np.int32)))
  all_val = np.asarray(multihost_utils.process_allgather(values))
  out = np.empty((total,) + values.shape[1:], values.dtype)
  out[all_idx.reshape(-1)] = all_val.reshape((-1,) + values.shape[1:])
  return out


def decode_rows(tokenizer, tokens: np.ndarray, lengths: np.ndarray) -> list[str]:
  """Completion texts (special tokens, e.g. the final eos, dropped)."""
  return [tokenizer.decode(tokens[i, : lengths[i]].tolist(), skip_special_tokens=True) for i in range(len(tokens))]


def overlong_penalty(lengths: np.ndarray, max_new_tokens: int, buffer_len: int, factor: float = 1.0) -> np.ndarray:
  """DAPO's soft overlong punishment: 0 up to max_new_tokens - buffer_len tokens, then falling
  linearly to -factor at max_new_tokens. lengths [B] -> [B] float32."""
  expected = max_new_tokens - buffer_len
  over = np.maximum(np.asarray(lengths, np.float32) - expected, 0.0)
  return (-factor * np.minimum(over / max(buffer_len, 1), 1.0)).astype(np.float32)


def select_groups(rewards: np.ndarray, mask: np.ndarray, collapse_std: float) -> np.ndarray:
  """[P] bool: groups with a usable contrast (std over valid samples >= collapse_std, n >= 2)."""
  m = mask.astype(np.float64)
  n = m.sum(-1)
  mean = (rewards * m).sum(-1) / np.maximum(n, 1)
  std = np.sqrt((np.square(rewards - mean[:, None]) * m).sum(-1) / np.maximum(n, 1))
  return (n >= 2) & (std >= collapse_std)


def fill_from_rounds(kept_per_round: Sequence[np.ndarray], num_groups: int) -> tuple[np.ndarray, np.ndarray, int]:
  """DAPO's dynamic sampling: the first `num_groups` kept groups over the rounds in order, topped up
  with not-kept groups of the first round when too few were kept.

  Returns (round index [P], group index [P], number of kept groups used).
  """
  chosen = [(r, int(g)) for r, kept in enumerate(kept_per_round) for g in np.flatnonzero(kept)][:num_groups]
  n_kept = len(chosen)
  if n_kept < num_groups:
    spare = [(0, int(g)) for g in np.flatnonzero(~kept_per_round[0])]
    chosen += spare[: num_groups - n_kept]
  rounds = np.array([r for r, _ in chosen], np.int32)
  groups_ = np.array([g for _, g in chosen], np.int32)
  return rounds, groups_, n_kept


def pad_widths(limit: int, count: int = 4, smallest: int = 8) -> tuple[int, ...]:
  """The widths a batch is padded or trimmed to: limit, limit / 2, limit / 4, ... (`count` of them,
  rounded up, none below `smallest` nor above `limit`), so at most `count` shapes compile."""
  return tuple(sorted({min(limit, max(smallest, -(-limit // 2**k))) for k in range(count)}))


def pad_width(longest: int, limit: int) -> int:
  """The smallest of `pad_widths(limit)` that holds `longest` tokens."""
  return next(w for w in pad_widths(limit) if w >= min(longest, limit))


def trim_left_padding(ids: np.ndarray, mask: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
  """Left-padded prompts ids, mask [B, L] -> [B, W]: the rightmost W = `pad_width(longest, L)`
  columns (every real token is kept, and positions count real tokens, so nothing else changes)."""
  limit = ids.shape[1]
  width = pad_width(int(mask.sum(axis=1).max(initial=1)), limit)
  return ids[:, limit - width :], mask[:, limit - width :]
