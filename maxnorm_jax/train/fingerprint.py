"""A fingerprint of a pytree of arrays, stored with each checkpoint and checked on restore.

orbax (0.12) checksums only the index of each zarr shard (crc32c), not the array bytes: flipped bytes
in a data file restore silently as other numbers. So every checkpoint also stores, per leaf, two
32-bit sums of the leaf's bit patterns (plain, and weighted by position so that moved bytes count
too), computed on the devices; a restored tree whose sums differ, or that holds a NaN or an
infinity, is refused.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

_PRIME = 65521  # position weights cycle through 1..65521


def _bits(x: jax.Array) -> jax.Array:
  """The bit pattern of every element as uint32 [n]."""
  x = jnp.ravel(x)
  if jnp.issubdtype(x.dtype, jax.dtypes.prng_key):
    x = jax.random.key_data(x).ravel()
  if x.dtype == jnp.bool_:
    return x.astype(jnp.uint32)
  width = x.dtype.itemsize
  if width == 4:
    return jax.lax.bitcast_convert_type(x, jnp.uint32)
  if width in (1, 2):
    unsigned = {1: jnp.uint8, 2: jnp.uint16}[width]
    return jax.lax.bitcast_convert_type(x, unsigned).astype(jnp.uint32)
  if width == 8:
    return jax.lax.bitcast_convert_type(x, jnp.uint32).ravel()
  raise TypeError(f"cannot fingerprint dtype {x.dtype}")


@jax.jit
def _sums(leaves):
  out = []
  for x in leaves:
    b = _bits(x)
    weights = (jnp.arange(b.shape[0], dtype=jnp.uint32) % _PRIME) + 1
    finite = jnp.all(jnp.isfinite(x)) if jnp.issubdtype(x.dtype, jnp.inexact) else jnp.bool_(True)
    out.append((jnp.sum(b, dtype=jnp.uint32), jnp.sum(b * weights, dtype=jnp.uint32), finite))
  return out


def _named_leaves(tree) -> tuple[list[str], list]:
  flat, _ = jax.tree_util.tree_flatten_with_path(tree)
  return [jax.tree_util.keystr(p) for p, _ in flat], [x for _, x in flat]


def fingerprint(tree) -> dict[str, list[int]]:
  """{leaf path: [sum of bits, position-weighted sum of bits] (mod 2**32)} of `tree`."""
  names, leaves = _named_leaves(tree)
  sums = jax.device_get(_sums(leaves))
  return {n: [int(s), int(w)] for n, (s, w, _) in zip(names, sums)}


def check(tree, expected: dict[str, list[int]] | None) -> str | None:
  """None when (if `expected` is given) every leaf matches it and is finite; else what is wrong.

  The fingerprint is checked first: altered bytes that happen to decode to a NaN are still reported
  as altered files, and "non-finite" is left to a state that was saved so (a diverged run)."""
  names, leaves = _named_leaves(tree)
  sums = jax.device_get(_sums(leaves))
  if expected is not None:
    got = {n: [int(s), int(w)] for n, (s, w, _) in zip(names, sums)}
    if set(got) != set(expected):
      return f"its arrays {sorted(set(got) ^ set(expected))[:3]} do not match the stored fingerprint"
    wrong = [n for n in names if got[n] != list(expected[n])]
    if wrong:
      return f"fingerprint mismatch in {len(wrong)} arrays (first: {wrong[0]}): the files were altered"
  bad = [n for n, (_, _, finite) in zip(names, sums) if not bool(np.asarray(finite))]
  if bad:
    return f"non-finite values in {len(bad)} arrays (first: {bad[0]})"
  return None
