"""Matmul throughput at the RL step's shapes by dtype: jax (XLA:CPU) beside torch, one process each.

    JAX_PLATFORMS=cpu .venv/bin/python benchmarks/matmul_dtypes.py [--repeats 20]
    .venv-bench/bin/python benchmarks/matmul_dtypes.py --torch

Each row is GFLOP/s of the best of --repeats calls. `fwd` is x [M, K] times w [K, N], the forward of a
projection (M = 128 rows x 72 tokens, one update minibatch); `dx` is g [M, N] times w^T, `dw` is
x^T g (the weight gradient, a contraction over the M tokens). `bf16 -> f32` is bfloat16 operands with
a float32 result, what `maxnorm_jax.models.layers.dense` asks for on 16-bit inputs.
"""

import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from benchmarks.report import best_time  # noqa: E402

SHAPES = ((9216, 256, 768), (9216, 256, 1536), (9216, 768, 256), (9216, 1536, 256))


def jax_rows(repeats: int):
  import jax
  import jax.numpy as jnp

  f32, bf16 = jnp.float32, jnp.bfloat16
  cases = {  # name -> (operand dtype, result dtype; None: the operands')
    "f32": (f32, None),
    "bf16 -> bf16": (bf16, None),
    "bf16 -> f32": (bf16, f32),
  }
  for m, k, n in SHAPES:
    for name, (dt, out) in cases.items():
      x, w, g = jnp.ones((m, k), dt), jnp.ones((k, n), dt), jnp.ones((m, n), dt)
      fwd = jax.jit(lambda x, w: jnp.dot(x, w, preferred_element_type=out))
      dx = jax.jit(lambda g, w: jnp.dot(g, w.T, preferred_element_type=out))
      dw = jax.jit(lambda x, g: jnp.dot(x.T, g, preferred_element_type=out))
      pairs = ((fwd, x, w), (dx, g, w), (dw, x, g))
      ts = [best_time(lambda: f(a, b).block_until_ready(), repeats, warmup=True) for f, a, b in pairs]
      yield f"jax {jax.__version__}", name, (m, k, n), [2 * m * k * n / t / 1e9 for t in ts]


def torch_rows(repeats: int):
  import torch

  for m, k, n in SHAPES:
    for name, dt in (("f32", torch.float32), ("bf16 -> bf16", torch.bfloat16)):
      x, w, g = torch.ones(m, k, dtype=dt), torch.ones(k, n, dtype=dt), torch.ones(m, n, dtype=dt)
      ts = [best_time(fn, repeats, warmup=True) for fn in (lambda: x @ w, lambda: g @ w.T, lambda: x.T @ g)]
      yield f"torch {torch.__version__}", name, (m, k, n), [2 * m * k * n / t / 1e9 for t in ts]


def main():
  parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
  parser.add_argument("--repeats", type=int, default=20)
  parser.add_argument("--torch", action="store_true", help="torch's matmuls instead of jax's")
  args = parser.parse_args()
  print("| library | dtypes | M x K x N | fwd | dx | dw (GFLOP/s) |\n|---|---|---|---|---|---|")
  for lib, name, (m, k, n), rates in (torch_rows if args.torch else jax_rows)(args.repeats):
    print(f"| {lib} | {name} | {m} x {k} x {n} | " + " | ".join(f"{r:.0f}" for r in rates) + " |", flush=True)


if __name__ == "__main__":
  main()
