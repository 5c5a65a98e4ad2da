"""Advantage estimators: jitted JAX against a per-group Python loop and vectorised NumPy.

  .venv/bin/python benchmarks/advantages.py [--write]

For rewards [P, 16] with P = 2048 and 65536 (ragged masks, rewards on a 1/4 grid), it times every
registry estimator jitted (block_until_ready, best of several repeats, compilation excluded),
the same formulas in masked, vectorised NumPy (maxnorm_jax.testing.numpy_reference), and a
Python loop over groups. The loop is timed on the first 2048 groups and scaled linearly to P
(it is linear in P; running 65536 groups in Python takes minutes). With --write the table goes
into BENCHMARKS.md under "## Advantage estimators".
"""

import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import jax
import numpy as np

from maxnorm_jax.core import advantages
from maxnorm_jax.testing import numpy_reference as ref

try:
  from benchmarks import report
except ImportError:  # run as a script from benchmarks/
  import report

G = 16
LOOP_GROUPS = 2048


def main():
  parser = argparse.ArgumentParser()
  parser.add_argument("--write", action="store_true", help="write the table into BENCHMARKS.md")
  parser.add_argument("--sizes", default="2048,65536")
  args = parser.parse_args()

  rows = []
  for p in [int(s) for s in args.sizes.split(",")]:
    rng = np.random.default_rng(0)
    r = (rng.integers(0, 5, size=(p, G)) / 4).astype(np.float32)
    m = rng.uniform(size=(p, G)) < 0.9
    rj, mj = jax.device_put(r), jax.device_put(m)
    for name in advantages.names():
      fn = jax.jit(lambda a, b, name=name: advantages.compute(name, a, b).advantages)
      reps = max(10, 400_000 // p)  # small inputs: many repeats, so the best time is not noise
      t_jax = report.best_time(lambda: fn(rj, mj).block_until_ready(), reps, warmup=True)
      t_np = None
      if name in ref.VECTORISED_NAMES:
        t_np = report.best_time(lambda: ref.vectorised_advantages(name, r, m), max(5, reps // 4), warmup=True)
        np.testing.assert_allclose(fn(rj, mj), ref.vectorised_advantages(name, r, m), rtol=1e-4, atol=1e-5)
      t_loop = None
      if name in ref.LOOP_NAMES:
        n = min(p, LOOP_GROUPS)
        t_loop = report.best_time(lambda: ref.loop_advantages(name, r[:n], m[:n]), 3, warmup=True) * p / n
      rows.append((p, name, t_jax, t_np, t_loop))
      print(
        f"P={p:6d} {name:22s} jax {t_jax * 1e3:8.3f} ms"
        + (f"  numpy {t_np * 1e3:8.3f} ms ({t_np / t_jax:5.1f}x)" if t_np else "")
        + (f"  loop {t_loop * 1e3:9.1f} ms ({t_loop / t_jax:7.0f}x)" if t_loop else ""),
        flush=True,
      )

  lines = [
    "| P x G | estimator | JAX jit (ms) | vectorised NumPy (ms) | NumPy / JAX | per-group loop (ms) | loop / JAX |",
    "|---|---|---:|---:|---:|---:|---:|",
  ]
  for p, name, t_jax, t_np, t_loop in rows:
    lines.append(
      f"| {p} x {G} | {name} | {t_jax * 1e3:.3f} | "
      + (f"{t_np * 1e3:.3f} | {t_np / t_jax:.1f}x | " if t_np else "- | - | ")
      + (f"{t_loop * 1e3:.1f} | {t_loop / t_jax:.0f}x |" if t_loop else "- | - |")
    )
  table = "\n".join(lines)
  print(table)
  if args.write:
    note = (
      f"Loop times are measured on the first {LOOP_GROUPS} groups and scaled linearly to P. "
      "Target: at least 100x the loop and 3x the vectorised NumPy version.\n"
      f"jax {jax.__version__}, numpy {np.__version__}, backend {jax.default_backend()}.\n\n"
    )
    report.update_section(
      "Advantage estimators",
      report.header(".venv/bin/python benchmarks/advantages.py --write") + "\n" + note + table,
    )


if __name__ == "__main__":
  main()
