"""The per-chip plan of a compiled step: bytes and peak of each piece against the chip's HBM,
FLOPs, a roofline time per piece and the implied MFU; as text or one JSON object."""

from __future__ import annotations

from typing import Any

import jax.numpy as jnp

from maxnorm_jax.plan import roofline as rf
from maxnorm_jax.plan.pieces import StepPlan
from maxnorm_jax.plan.topology import GIB, Chip


def _model_parallel(plan: StepPlan) -> int:
  """How many ways each weight stays split when a layer runs (FSDP gathers, tensor/expert do not)."""
  shape = plan.mesh.shape
  return shape.get("tensor", 1) * shape.get("expert", 1)


def weight_bytes(plan: StepPlan) -> int:
  """All parameters in the compute dtype (what a forward pass reads), over all chips."""
  return plan.param_count * jnp.dtype(plan.model.jnp_dtype).itemsize


def piece_rooflines(plan: StepPlan, chip: Chip, epochs: int, updates: int, micro: int) -> dict[str, rf.Roofline]:
  """Roofline per piece name. `updates`: optimiser steps per RL step; `micro`: microbatches in all."""
  cfg, b, length, n = plan.model, plan.rows, plan.prompt_len, plan.new_tokens
  chips = plan.mesh.size
  read = weight_bytes(plan) / _model_parallel(plan)  # weights each chip reads per forward pass
  steps = max(n - 1, 0)

  def line(flops, hbm):
    return rf.Roofline(flops, hbm, chips, chip.peak_flops, chip.hbm_bandwidth)

  state_bytes = plan.param_bytes + plan.opt_state_bytes
  bp = b // plan.sample_chunks  # rows of one sampler pass (the pieces' `calls` count the passes)
  out = {
    "prefill": line(rf.prefill_flops(cfg, plan.prefill_rows, length), read + plan.kv_cache_bytes),
    "decode": line(steps * rf.decode_step_flops(cfg, bp, length + n), steps * (read + plan.kv_cache_bytes)),
    "old_logprobs": line(rf.logprob_flops(cfg, b, length, n), read),
    "advantage_card": line(0.0, 0.0),
    "update": line(rf.update_flops(cfg, b, length, n, epochs), 3 * micro * read + 3 * updates * state_bytes),
  }
  out["ref_logprobs"] = out["old_logprobs"]  # the same pass with the reference's weights
  return out


def summarize(plan: StepPlan, chip: Chip, topology: str, c: Any) -> dict:
  """The plan as one JSON-able dict (bytes per chip, FLOPs over all chips, seconds)."""
  epochs, m, a = c.train.ppo_epochs, c.train.minibatches, c.train.grad_accum
  lines = piece_rooflines(plan, chip, epochs, epochs * m, epochs * m * a)
  pieces = {}
  for piece in plan.pieces:
    mem = piece.memory
    line = lines[piece.name]
    pieces[piece.name] = dict(
      fits=piece.error is None and piece.peak_bytes <= chip.hbm_bytes,
      compiler_error=piece.error,
      peak_bytes=piece.peak_bytes,
      bytes=piece.peak_bytes,
      argument_bytes=mem.argument_size_in_bytes,
      output_bytes=mem.output_size_in_bytes,
      alias_bytes=mem.alias_size_in_bytes,
      temp_bytes=mem.temp_size_in_bytes,
      code_bytes=mem.generated_code_size_in_bytes,
      resident_bytes=piece.resident_bytes,
      flops=line.flops * piece.calls,
      xla_flops_per_chip=piece.xla_flops_per_chip(),
      hbm_bytes_per_chip=line.hbm_bytes_per_chip * piece.calls,
      est_s=line.seconds * piece.calls,
      bound=line.bound,
      compile_s=round(piece.compile_s, 2),
    )
  peak_name = max(pieces, key=lambda k: pieces[k]["peak_bytes"])
  flops = sum(p["flops"] for p in pieces.values())
  est = sum(p["est_s"] for p in pieces.values())
  chips = plan.mesh.size
  cfg = plan.model
  return dict(
    fits=all(p["fits"] for p in pieces.values()),
    topology=topology,
    chip=chip.name,
    chips=chips,
    mesh=dict(plan.mesh.shape),
    model=c.model.preset,
    model_source=plan.model_source,
    param_count=plan.param_count,
    param_dtype=cfg.param_dtype,
    compute_dtype=cfg.dtype,
    shapes=dict(
      prompts=c.data.batch_size,
      group_size=c.rollout.group_size,
      rows=plan.rows,
      prompt_len=plan.prompt_len,
      new_tokens=plan.new_tokens,
      minibatches=m,
      grad_accum=a,
      sample_chunks=plan.sample_chunks,
      prefill_rows=plan.prefill_rows,
      old_logp=c.rollout.old_logp,
      ppo_epochs=epochs,
      remat=cfg.remat,
    ),
    hbm_bytes_per_chip=chip.hbm_bytes,
    param_bytes_per_chip=plan.param_bytes,
    opt_state_bytes_per_chip=plan.opt_state_bytes,
    reference_bytes_per_chip=plan.reference_bytes,
    kv_cache_bytes_per_chip=plan.kv_cache_bytes,
    peak_bytes_per_chip=pieces[peak_name]["peak_bytes"],
    peak_piece=peak_name,
    pieces=pieces,
    flops_per_step=flops,
    est_step_s=est,
    mfu=flops / (est * chips * chip.peak_flops) if est > 0 else 0.0,
    peak_flops_per_chip=chip.peak_flops,
    hbm_bandwidth_per_chip=chip.hbm_bandwidth,
  )


def gib(x: float) -> str:
  """Bytes in GiB (MiB below 1 GiB)."""
  return f"{x / GIB:.2f} GiB" if x >= GIB else f"{x / 1024**2:.1f} MiB"


def failures(plan: StepPlan, summary: dict) -> list[str]:
  """One message per piece that does not fit, naming its largest arguments and buffers."""
  out = []
  for piece in plan.pieces:
    info = summary["pieces"][piece.name]
    if info["fits"]:
      continue
    args = ", ".join(f"{p} {gib(b)} {list(s)}" for p, b, s in piece.largest_arguments())
    if piece.error:
      out.append(
        f"piece {piece.name!r} does not fit: the TPU compiler ran out of HBM; largest arguments: {args}; "
        f"compiler: {piece.error[:3000]}"
      )
      continue
    bufs = ", ".join(f"{n} {t} {gib(b)}" for n, b, t in piece.largest_buffers())
    out.append(
      f"piece {piece.name!r} does not fit: {gib(info['peak_bytes'])} per chip > {gib(summary['hbm_bytes_per_chip'])} "
      f"HBM ({gib(info['temp_bytes'])} temporaries, {gib(info['resident_bytes'])} resident state); "
      f"largest arguments: {args}; largest buffers: {bufs}"
    )
  return out


def text(summary: dict) -> str:
  s = summary
  sh = s["shapes"]
  depth = ""
  if "extrapolated_from_layers" in s:
    a, b = s["extrapolated_from_layers"]
    depth = f"; {s['num_layers']} layers extrapolated from compiles of {a} and {b}"
  lines = [
    f"plan: {s['model']} ({s['param_count'] / 1e9:.2f}B params, {s['param_dtype']} params, {s['compute_dtype']} "
    f"compute; shape from {s['model_source']}{depth}) on {s['topology']} = {s['chips']} {s['chip']} chips, mesh {s['mesh']}",
    f"step: {sh['prompts']} prompts x {sh['group_size']} samples = {sh['rows']} rows, prompt {sh['prompt_len']} + "
    f"{sh['new_tokens']} new tokens, {sh['ppo_epochs']} epoch(s) x {sh['minibatches']} minibatches x "
    f"{sh['grad_accum']} accumulation, remat={sh['remat']}, sampled in {sh.get('sample_chunks', 1)} pass(es)",
    f"per chip: params {gib(s['param_bytes_per_chip'])}, optimizer state {gib(s['opt_state_bytes_per_chip'])}, "
    f"reference {gib(s['reference_bytes_per_chip'])}, KV cache {gib(s['kv_cache_bytes_per_chip'])}, "
    f"HBM {gib(s['hbm_bytes_per_chip'])}",
    f"{'piece':<15} {'peak/chip':>11} {'temp/chip':>11} {'of HBM':>7} {'TFLOPs':>10} {'est s':>9} {'bound':>8} fits",
  ]
  for name, p in s["pieces"].items():
    lines.append(
      f"{name:<15} {gib(p['peak_bytes']):>11} {gib(p['temp_bytes']):>11} "
      f"{p['peak_bytes'] / s['hbm_bytes_per_chip']:>6.0%} {p['flops'] / 1e12:>10.2f} {p['est_s']:>9.3f} "
      f"{p['bound']:>8} {'yes' if p['fits'] else 'NO'}"
    )
  lines.append(
    f"step: {s['flops_per_step'] / 1e12:.1f} TFLOPs, estimated {s['est_step_s']:.2f} s (roofline), MFU "
    f"{s['mfu']:.1%}; peak {gib(s['peak_bytes_per_chip'])} per chip in {s['peak_piece']}: "
    f"{'fits' if s['fits'] else 'DOES NOT FIT'}"
  )
  return "\n".join(lines)
