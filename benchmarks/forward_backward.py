"""Forward and backward pass of the log-prob loss: model FLOPs per second over the machine's
float32 matmul peak (MFU), both measured in the same run.

Shape: a Qwen3 of 4 layers, width 512 (8 heads / 4 kv heads of 64, mlp 1536), vocab 8192,
batch 4, sequence 256, float32.

  .venv/bin/python -m benchmarks.forward_backward [--write]
"""

from __future__ import annotations

import argparse
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
from flax import nnx  # noqa: E402

from maxnorm_jax.models import ModelConfig, create_model, next_token_targets, token_logprobs  # noqa: E402

BATCH, SEQ = 4, 256
CFG = ModelConfig(
  vocab_size=8192,
  hidden_size=512,
  intermediate_size=1536,
  num_layers=4,
  num_heads=8,
  num_kv_heads=4,
  head_dim=64,
  model_type="qwen3",
  tie_word_embeddings=False,
)


def measure_matmul_peak(n: int = 2048, repeats: int = 3) -> float:
  """float32 FLOP/s of an n^3 matmul through XLA (best of `repeats`)."""
  a = jnp.ones((n, n), jnp.float32)
  f = jax.jit(lambda x, y: x @ y)
  f(a, a).block_until_ready()
  best = float("inf")
  for _ in range(repeats):
    t = time.perf_counter()
    f(a, a).block_until_ready()
    best = min(best, time.perf_counter() - t)
  return 2 * n**3 / best


def model_flops(cfg: ModelConfig, batch: int, seq: int) -> float:
  """Forward + backward FLOPs: 6 x matmul parameters x tokens, plus 3 x the attention score and
  value products (2 * 2 * T * H * D per token and layer, causal masking not subtracted)."""
  e, f, h, k, d = cfg.hidden_size, cfg.intermediate_size, cfg.num_heads, cfg.num_kv_heads, cfg.head_dim
  matmul_params = cfg.num_layers * (e * (h + 2 * k) * d + h * d * e + 3 * e * f) + e * cfg.vocab_size
  tokens = batch * seq
  attention = cfg.num_layers * 2 * 2 * seq * h * d * tokens
  return 6 * matmul_params * tokens + 3 * attention


def main():
  parser = argparse.ArgumentParser()
  parser.add_argument("--write", action="store_true", help="write the section of BENCHMARKS.md")
  parser.add_argument("--repeats", type=int, default=3)
  args = parser.parse_args()

  model = create_model(CFG, seed=0)
  graphdef, params = nnx.split(model)
  ids = jnp.asarray(np.random.RandomState(0).randint(0, CFG.vocab_size, (BATCH, SEQ)))
  targets, mask = next_token_targets(ids)

  @jax.jit
  def loss_and_grad(params, ids, targets, mask):
    def loss(params):
      m = nnx.merge(graphdef, params)
      out = token_logprobs(m, ids, targets, mask, chunk_size=128)
      return -jnp.sum(out.logp) / jnp.sum(mask)

    return jax.value_and_grad(loss)(params)

  t = time.perf_counter()
  jax.block_until_ready(loss_and_grad(params, ids, targets, mask))
  compile_s = time.perf_counter() - t
  best, peak = float("inf"), 0.0
  for _ in range(args.repeats):  # interleaved with the peak measurement: both see the same load
    t = time.perf_counter()
    jax.block_until_ready(loss_and_grad(params, ids, targets, mask))
    best = min(best, time.perf_counter() - t)
    peak = max(peak, measure_matmul_peak(repeats=1))
  flops = model_flops(CFG, BATCH, SEQ)
  achieved = flops / best
  lines = [
    "Shape: Qwen3, 4 layers, width 512 (8 heads / 4 kv heads of 64, mlp 1536), vocab 8192, float32; "
    f"batch {BATCH}, sequence {SEQ}; jitted forward + backward of the chunked log-prob loss "
    f"(chunks of 128 positions), no rematerialisation; best of {args.repeats}, interleaved with the "
    "peak measurement.",
    "",
    f"- Step time {best:.3f} s (first call, compile included, {compile_s:.1f} s).",
    f"- Model FLOPs per step {flops / 1e9:.1f} GFLOP (6 x matmul parameters x tokens + attention).",
    f"- Achieved {achieved / 1e9:.1f} GFLOP/s; float32 matmul peak measured in the same run "
    f"{peak / 1e9:.1f} GFLOP/s (2048^3).",
    f"- MFU: {100 * achieved / peak:.0f}% (target 40%). Load average at the end of the run "
    f"{os.getloadavg()[0]:.2f} on {os.cpu_count()} cores (the machine is shared).",
  ]
  body = "\n".join(lines)
  print(body)
  if args.write:
    from benchmarks.report import header, update_section

    update_section(
      "Forward and backward", header(".venv/bin/python -m benchmarks.forward_backward --write") + "\n" + body
    )


if __name__ == "__main__":
  main()
