"""Masked per-group statistics over [P, G] rewards, shared by the estimators and the protocol.

Every function is vectorised over the P axis, jit-able, and finite for any finite input, also
for magnitudes near 1e30 or 1e-30 (squares are taken after dividing by the largest deviation).
"""

import jax
import jax.numpy as jnp


def as_rewards_and_mask(rewards, mask=None) -> tuple[jax.Array, jax.Array]:
  """Converts numpy or jax inputs to a floating [P, G] array and a bool [P, G] mask."""
  rewards = jnp.asarray(rewards)
  if not jnp.issubdtype(rewards.dtype, jnp.floating):
    rewards = rewards.astype(jnp.float32)
  if rewards.ndim != 2:
    raise ValueError(f"rewards must have shape [P, G], got shape {rewards.shape}")
  if mask is None:
    mask = jnp.ones_like(rewards, dtype=bool)  # inherits the rewards' sharding
  else:
    mask = jnp.asarray(mask).astype(bool)
    if mask.shape != rewards.shape:
      raise ValueError(f"mask shape {mask.shape} does not match rewards shape {rewards.shape}")
  # Masked entries never reach arithmetic: NaN or inf behind the mask stays harmless.
  return jnp.where(mask, rewards, 0.0), mask


def count(mask: jax.Array) -> jax.Array:
  """[P] number of valid samples n_q (float)."""
  return jnp.sum(mask, axis=-1).astype(jnp.float32)


def mean(x: jax.Array, mask: jax.Array) -> jax.Array:
  """[P] masked mean over G; 0 for empty groups."""
  n = jnp.maximum(count(mask), 1.0).astype(x.dtype)
  return jnp.sum(jnp.where(mask, x / n[:, None], 0.0), axis=-1)


def max_abs(x: jax.Array, mask: jax.Array) -> jax.Array:
  """[P] masked max |x| over G; 0 for empty groups."""
  return jnp.max(jnp.where(mask, jnp.abs(x), 0.0), axis=-1)


def centered_std(
  centered: jax.Array, mask: jax.Array, ddof: int | float = 1, bound: jax.Array | None = None
) -> jax.Array:
  """[P] std of already-centred values, with `ddof`; 0 where n_q <= ddof.

  Computed as m * sqrt(sum((x/m)^2) / (n - ddof)) with m = max |x| (or `bound`, any [P] value
  >= max |x| that is 0 only when x is, such as the group's span) so squares never overflow or
  underflow.
  """
  m = max_abs(centered, mask) if bound is None else bound
  safe_m = jnp.where(m > 0, m, 1.0)
  ratio = jnp.where(mask, centered / safe_m[:, None], 0.0)
  dof = count(mask) - ddof
  var_ratio = jnp.sum(ratio * ratio, axis=-1) / jnp.maximum(dof, 1.0).astype(centered.dtype)
  return jnp.where(dof > 0, m * jnp.sqrt(var_ratio), 0.0)


def std(x: jax.Array, mask: jax.Array, ddof: int | float = 1) -> jax.Array:
  """[P] masked std over G with `ddof`; 0 where n_q <= ddof."""
  return centered_std(x - mean(x, mask)[:, None], mask, ddof)


def span(x: jax.Array, mask: jax.Array) -> jax.Array:
  """[P] max - min of the valid entries; 0 for empty groups."""
  hi = jnp.max(jnp.where(mask, x, -jnp.inf), axis=-1)
  lo = jnp.min(jnp.where(mask, x, jnp.inf), axis=-1)
  return jnp.where(jnp.any(mask, axis=-1), hi - lo, 0.0)


def max_abs_deviation(x: jax.Array, mask: jax.Array) -> jax.Array:
  """[P] max |x - mean_q| over valid entries, from the group's max and min (no extra pass)."""
  hi = jnp.max(jnp.where(mask, x, -jnp.inf), axis=-1)
  lo = jnp.min(jnp.where(mask, x, jnp.inf), axis=-1)
  mu = mean(x, mask)
  return jnp.where(jnp.any(mask, axis=-1), jnp.maximum(hi - mu, mu - lo), 0.0)


def has_contrast(x: jax.Array, mask: jax.Array) -> jax.Array:
  """[P] bool: at least two valid samples and not all equal."""
  return (count(mask) >= 2) & (span(x, mask) > 0)


def unsharded_last_axis(x: jax.Array) -> jax.Array:
  """x with its last axis gathered when it is sharded over an explicit mesh axis.

  Sorting needs the whole axis on each device; outside a mesh this returns x unchanged.
  """
  sharding = jax.typeof(x).sharding
  spec = tuple(getattr(sharding, "spec", ()) or ())
  if getattr(sharding, "mesh", None) is None or sharding.mesh.empty or len(spec) < x.ndim:
    return x
  if spec[x.ndim - 1] is None:
    return x
  return jax.sharding.reshard(x, jax.sharding.PartitionSpec(*spec[: x.ndim - 1], None))


def resolution_tolerance(x: jax.Array, mask: jax.Array) -> jax.Array:
  """[P] float rounding slack for comparing reward gaps with delta_res: 4 ulp of max |x|.

  A 1/100-grid gap such as 0.51 - 0.5 is 0.00999999 in float32 and must still count as 0.01.
  """
  return 4 * jnp.finfo(x.dtype).eps * max_abs(x, mask)


def masked_quantile(x: jax.Array, mask: jax.Array, q) -> jax.Array:
  """[...] the `q` quantile along the last axis over valid entries, linear interpolation.

  numpy's default method: position q * (n - 1) in the sorted valid values. 0 for empty rows.
  Short axes (a group's G) use pairwise ranks, which XLA fuses; long ones a sort.
  """
  x, mask = unsharded_last_axis(x), unsharded_last_axis(mask)
  n = jnp.sum(mask, axis=-1)
  pos = jnp.asarray(q, x.dtype) * jnp.maximum(n - 1, 0).astype(x.dtype)
  lo = jnp.floor(pos)
  frac = pos - lo
  lo_i = lo.astype(jnp.int32)
  hi_i = jnp.minimum(lo_i + 1, jnp.maximum(n - 1, 0))
  if x.shape[-1] <= _PAIRWISE_MAX:
    v_lo, v_hi = _order_statistics(x, mask, lo_i, hi_i)
  else:
    big = jnp.asarray(jnp.finfo(x.dtype).max, x.dtype)
    ordered = jnp.sort(jnp.where(mask, x, big), axis=-1)
    v_lo = jnp.take_along_axis(ordered, lo_i[..., None], axis=-1)[..., 0]
    v_hi = jnp.take_along_axis(ordered, hi_i[..., None], axis=-1)[..., 0]
  return jnp.where(n > 0, v_lo + frac * (v_hi - v_lo), 0.0)


_PAIRWISE_MAX = 64


def _order_statistics(x, mask, lo_i, hi_i):
  """The lo_i-th and hi_i-th smallest valid entries (0-based) along a short last axis.

  The k-th smallest is the least x_i with more than k valid entries <= x_i (ties included).
  """
  at_most = jnp.sum((x[..., None, :] <= x[..., :, None]) & mask[..., None, :], axis=-1)  # [..., G]
  big = jnp.asarray(jnp.finfo(x.dtype).max, x.dtype)

  def pick(k):
    return jnp.min(jnp.where(mask & (at_most > k[..., None]), x, big), axis=-1)

  return pick(lo_i), pick(hi_i)
