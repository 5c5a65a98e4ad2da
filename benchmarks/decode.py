"""Greedy decode throughput: maxnorm_jax's KV-cache sampler against transformers' `generate`.

Same weights (a random Qwen3 of 4 layers, width 256, vocab 8192), same machine, one run: batch 16,
prompt 32, 96 new tokens. Also measures this machine's copy bandwidth and float32 matmul peak and
reports the rooflines of the decode step (bytes moved per step / bandwidth; FLOPs / peak).

  .venv/bin/python -m benchmarks.decode [--write]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402

from benchmarks.report import best_time  # noqa: E402
from maxnorm_jax.models import hf  # noqa: E402
from maxnorm_jax.sampling import generate  # noqa: E402

BATCH, PROMPT, NEW = 16, 32, 96
SHAPE = dict(
  vocab_size=8192,
  hidden_size=256,
  intermediate_size=768,
  num_hidden_layers=4,
  num_attention_heads=4,
  num_key_value_heads=2,
  head_dim=64,
  tie_word_embeddings=False,
  max_position_embeddings=1024,
)


def measure_bandwidth(nbytes: int, threads: int | None = None) -> float:
  """Bytes per second (read + write counted) of copying an `nbytes` buffer with numpy, split over
  `threads` threads (default: one per core), best of several passes."""
  import threading

  threads = threads or os.cpu_count()
  n = nbytes // 4 // threads * threads
  src = np.ones(n, np.float32)
  dst = np.empty_like(src)
  parts = np.array_split(np.arange(n), threads)
  bounds = [(int(p[0]), int(p[-1]) + 1) for p in parts]
  passes = max(3, int(2e9 // max(nbytes, 1)))

  def copy(lo, hi):
    for _ in range(passes):
      np.copyto(dst[lo:hi], src[lo:hi])

  best = float("inf")
  for _ in range(3):
    workers = [threading.Thread(target=copy, args=b) for b in bounds]
    t = time.perf_counter()
    for w in workers:
      w.start()
    for w in workers:
      w.join()
    best = min(best, time.perf_counter() - t)
  return 2 * n * 4 * passes / best


def measure_matmul_peak(n: int = 2048) -> float:
  """float32 FLOP/s of an n^3 matmul through XLA."""
  a = jnp.ones((n, n), jnp.float32)
  f = jax.jit(lambda x, y: x @ y)
  f(a, a).block_until_ready()
  t = best_time(lambda: f(a, a).block_until_ready(), 3)
  return 2 * n**3 / t


def step_costs(cfg, batch: int, context: int) -> tuple[float, float]:
  """(FLOPs, bytes) of one decode step at a mean context length (float32 weights and cache)."""
  e, f, h, k, d, v, layers = (
    cfg.hidden_size,
    cfg.intermediate_size,
    cfg.num_heads,
    cfg.num_kv_heads,
    cfg.head_dim,
    cfg.vocab_size,
    cfg.num_layers,
  )
  per_layer = e * (h + 2 * k) * d + h * d * e + 3 * e * f
  matmul_params = layers * per_layer + e * v
  flops = 2 * batch * matmul_params + layers * 2 * 2 * batch * h * d * context
  weight_bytes = 4 * (matmul_params + layers * 2 * e + e)
  cache_bytes = 4 * layers * 2 * batch * k * d * context
  embed_rows = 4 * batch * e
  return flops, weight_bytes + cache_bytes + embed_rows


def decode_loop_seconds(model, ids, mask, repeats: int) -> float:
  """Best time of the compiled decode loop alone (NEW - 1 steps after the prefill)."""
  from maxnorm_jax.sampling import Greedy, decode, prefill

  kw = dict(cfg=model.config, weights=model.weights(), method=Greedy(), eos_id=None, pad_id=0)
  best = float("inf")
  for _ in range(repeats):
    state = prefill(
      **kw,
      prompt_ids=jnp.asarray(ids, jnp.int32),
      prompt_mask=jnp.asarray(mask, bool),
      key=jax.random.key(0),
      max_new_tokens=NEW,
    )
    jax.block_until_ready(state)
    t = time.perf_counter()
    jax.block_until_ready(decode(**kw, state=state))
    best = min(best, time.perf_counter() - t)
  return best


def main():
  parser = argparse.ArgumentParser()
  parser.add_argument("--write", action="store_true", help="write the section of BENCHMARKS.md")
  parser.add_argument("--repeats", type=int, default=3)
  args = parser.parse_args()

  import torch
  from transformers import AutoModelForCausalLM, Qwen3Config

  torch.manual_seed(0)
  torch.set_num_threads(os.cpu_count())
  theirs = AutoModelForCausalLM.from_config(Qwen3Config(**SHAPE)).eval()
  theirs.generation_config.eos_token_id = None
  theirs.generation_config.pad_token_id = 0
  with tempfile.TemporaryDirectory() as d:
    theirs.save_pretrained(d)
    ours = hf.load(d)
  cfg = ours.config

  rng = np.random.RandomState(0)
  ids = rng.randint(1, SHAPE["vocab_size"], (BATCH, PROMPT))
  mask = np.ones_like(ids)
  key = jax.random.key(0)

  def run_ours():
    out = generate(ours, ids, mask, key, NEW, temperature=0.0)
    return out.tokens.block_until_ready()

  t0 = time.perf_counter()
  ours_tokens = np.asarray(run_ours())
  compile_s = time.perf_counter() - t0

  def run_theirs():
    with torch.no_grad():
      return theirs.generate(torch.tensor(ids), attention_mask=torch.tensor(mask), max_new_tokens=NEW, do_sample=False)

  theirs_tokens = run_theirs()[:, PROMPT:].numpy()
  # Interleaved, so that both see the same load on a shared machine; best of the repeats.
  ours_s = theirs_s = loop_s = float("inf")
  for _ in range(args.repeats):
    ours_s = min(ours_s, best_time(run_ours, 1))
    theirs_s = min(theirs_s, best_time(run_theirs, 1))
    loop_s = min(loop_s, decode_loop_seconds(ours, ids, mask, 1))
  agree = float(np.mean(ours_tokens == theirs_tokens))

  flops, nbytes = step_costs(cfg, BATCH, PROMPT + NEW // 2)
  bandwidth = measure_bandwidth(nbytes)  # a working set the size of one decode step
  bandwidth_dram = measure_bandwidth(256 * 2**20)
  peak = measure_matmul_peak()
  bw_roofline = BATCH * bandwidth / nbytes
  compute_roofline = BATCH * peak / flops
  roofline = min(bw_roofline, compute_roofline)
  ours_tps = BATCH * NEW / ours_s
  theirs_tps = BATCH * NEW / theirs_s

  lines = [
    f"Shape: Qwen3, 4 layers, width 256, 4 heads / 2 kv heads of 64, mlp 768, vocab 8192, float32; "
    f"batch {BATCH}, prompt {PROMPT}, {NEW} new tokens, greedy; best of {args.repeats} interleaved "
    f"runs (prefill included in both).",
    "",
    "| | tokens/s | time (s) |",
    "|---|---|---|",
    f"| maxnorm_jax `generate` | {ours_tps:,.0f} | {ours_s:.3f} |",
    f"| transformers `generate` | {theirs_tps:,.0f} | {theirs_s:.3f} |",
    "",
    f"- maxnorm_jax's decode loop alone (prefill excluded): {BATCH * (NEW - 1) / loop_s:,.0f} tokens/s, "
    f"{1e3 * loop_s / (NEW - 1):.2f} ms per step.",
    f"- Speed-up over transformers: {ours_tps / theirs_tps:.2f}x (target 3x). "
    f"Greedy tokens agreeing with transformers: {100 * agree:.1f}%. First call (compile) {compile_s:.1f} s.",
    f"- Measured here: copy bandwidth {bandwidth / 1e9:.1f} GB/s over a {nbytes / 1e6:.0f} MB working set "
    f"({bandwidth_dram / 1e9:.1f} GB/s over 256 MiB), {os.cpu_count()} threads; float32 matmul peak "
    f"{peak / 1e9:.1f} GFLOP/s (2048^3). Load average at the end of the run "
    f"{os.getloadavg()[0]:.2f} (the machine is shared).",
    f"- Per decode step (mean context {PROMPT + NEW // 2}): {flops / 1e6:.0f} MFLOP, {nbytes / 1e6:.1f} MB.",
    f"- Rooflines: bandwidth {bw_roofline:,.0f} tokens/s, compute {compute_roofline:,.0f} tokens/s; "
    f"reached {100 * ours_tps / bw_roofline:.0f}% of the bandwidth roofline and "
    f"{100 * ours_tps / roofline:.0f}% of the binding (lower) one (target 50%).",
  ]
  lines += [
    "",
    "What the decode loop does: one jitted `lax.while_loop` over a donated, preallocated cache (keys "
    "laid out [B, K, D, S] so q.K is a plain batched matmul); fused q/k/v, gate/up and flattened output "
    'projections prepared once per call outside the loop; the head as [V, E] ("be,ve->bv" ran ~1.5x '
    "faster than [E, V] at batch 16); greedy as max + first index of the max sharing the logsumexp; "
    "no PRNG work in the greedy loop.",
    "Tried without gain here: other `xla_cpu_experimental_ynn_fusion_type` settings (dots only, no "
    "XNNPACK dots), splitting the head matmul, multiply-reduce attention. A profile of the loop shows "
    "the small-M (16-row) matmuls through XNNPACK at roughly 45-70 GFLOP/s, well under the 2048^3 "
    "peak, and they take about two thirds of a step; that, not bandwidth, keeps the loop far from "
    "both rooflines.",
  ]
  body = "\n".join(lines)
  print(body)
  if args.write:
    from benchmarks.report import header, update_section

    update_section("Decode", header(".venv/bin/python -m benchmarks.decode --write") + "\n" + body)


if __name__ == "__main__":
  main()
