"""This machine as a "chip" for `--topology=cpu`: measured matmul peak and copy bandwidth, and the
host memory split over the (possibly simulated) CPU devices."""

from __future__ import annotations

import os
import time

from maxnorm_jax.plan.topology import Chip


def _best(fn, *args, repeats: int = 5) -> float:
  fn(*args).block_until_ready()
  best = float("inf")
  for _ in range(repeats):
    t0 = time.perf_counter()
    fn(*args).block_until_ready()
    best = min(best, time.perf_counter() - t0)
  return best


def host_memory_bytes() -> int:
  return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


def measure_cpu_chip(dtype, devices: int) -> Chip:
  """Matmul FLOP/s in `dtype` and copy bandwidth of the whole CPU, split evenly over `devices`."""
  import jax
  import jax.numpy as jnp

  n = 1024
  a = jnp.ones((n, n), dtype)
  matmul = jax.jit(lambda x: x @ x)
  flops = 2 * n**3 / _best(matmul, a)
  big = jnp.ones((64 * 1024 * 1024,), jnp.float32)  # 256 MiB
  copy = jax.jit(lambda x: x * 1.0001)
  bandwidth = 2 * big.nbytes / _best(copy, big, repeats=3)
  return Chip("cpu", host_memory_bytes() // devices, flops / devices, bandwidth / devices, 1, 1)
