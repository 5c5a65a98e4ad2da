"""Plans of deep models from two shallow compiles: every per-chip byte count and FLOP count of a
step is linear in the number of decoder layers (the layers are identical: unrolled in the
sampler, one scan over stacked weights in the rematerialised log-prob and update passes), so the
plan at L layers is read off the line through the plans at a and b layers. Compiling the 64 layers
of Qwen3-32B for a TPU takes tens of minutes on a 2-core CPU; two compiles of 2 and 4 layers take
a few. PLAN.md checks the line against full compiles of smaller presets."""

from __future__ import annotations

from typing import Any

_MEASURED = ("compile_s",)  # kept as measured (summed over the two compiles), not extrapolated


def with_layers(c: Any, layers: int) -> Any:
  """A copy of config `c` whose decoder has `layers` layers."""
  c = c.copy_and_resolve_references()
  if c.model.kind == "tiny":
    c.model.num_layers = layers
  else:
    c.model.arch.num_hidden_layers = layers
  return c


def _line(va, vb, t: float):
  if isinstance(va, bool) or not isinstance(va, (int, float)) or not isinstance(vb, (int, float)):
    return vb
  v = va + (vb - va) * t
  return int(round(v)) if isinstance(va, int) and isinstance(vb, int) else v


def _walk(a, b, t: float):
  if isinstance(a, dict):
    return {k: (a[k] + b[k] if k in _MEASURED else _walk(a[k], b[k], t)) for k in b}
  return _line(a, b, t)


def extrapolate(sa: dict, sb: dict, la: int, lb: int, target: int) -> dict:
  """The summary at `target` layers from summaries `sa`, `sb` at `la` < `lb` layers."""
  if not la < lb:
    raise ValueError(f"--layers: need two layer counts a < b, got {la}, {lb}")
  out = _walk(sa, sb, (target - la) / (lb - la))
  hbm = out["hbm_bytes_per_chip"]
  for name, p in out["pieces"].items():
    p["fits"] = p["compiler_error"] is None and sa["pieces"][name]["compiler_error"] is None and p["peak_bytes"] <= hbm
  peak = max(out["pieces"], key=lambda k: out["pieces"][k]["peak_bytes"])
  out.update(
    fits=all(p["fits"] for p in out["pieces"].values()),
    peak_piece=peak,
    peak_bytes_per_chip=out["pieces"][peak]["peak_bytes"],
    flops_per_step=sum(p["flops"] for p in out["pieces"].values()),
    est_step_s=sum(p["est_s"] for p in out["pieces"].values()),
    num_layers=target,
    extrapolated_from_layers=[la, lb],
  )
  out["mfu"] = out["flops_per_step"] / (out["est_step_s"] * out["chips"] * out["peak_flops_per_chip"])
  return out
