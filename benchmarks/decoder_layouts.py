"""The decoder's forward and backward at issue 11's minibatch, with and without fused weights.

    XLA_FLAGS= python benchmarks/decoder_layouts.py [--repeats 5]
    XLA_FLAGS=--xla_cpu_experimental_ynn_fusion_type= python benchmarks/decoder_layouts.py

One 128-row minibatch of 8 + 64 tokens through the random 4-layer decoder of
`benchmarks/update_profile.py`: the jitted forward (`hidden_states` + `logprobs_from_hidden`) and
`jax.grad` of the summed log-probs, each with the layer weights as stored and with q/k/v and
gate/up fused inside the jit (`layers.fuse_weights`). Medians of `--repeats`, the four functions
interleaved. Compare XLA flags by running it once per setting.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

import jax
import jax.numpy as jnp
import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from benchmarks.update_profile import KV, LAYERS, MINIBATCHES, D, E, F, G, H, L, N, P, V, model_flops  # noqa: E402
from maxnorm_jax.models import ModelConfig, create_model, layers  # noqa: E402
from maxnorm_jax.models.decoder import hidden_states  # noqa: E402
from maxnorm_jax.models.logprobs import logprobs_from_hidden  # noqa: E402
from maxnorm_jax.parallel import DEFAULT_RULES, make_mesh  # noqa: E402

ROWS = P * G // MINIBATCHES


def main():
  parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
  parser.add_argument("--repeats", type=int, default=5)
  args = parser.parse_args()
  cfg = ModelConfig.tiny(
    V, hidden_size=E, intermediate_size=F, num_layers=LAYERS, num_heads=H, num_kv_heads=KV, head_dim=D
  )
  params = create_model(cfg, make_mesh({"data": -1}), DEFAULT_RULES, seed=0).weights()
  rng = np.random.default_rng(0)
  ids = jnp.asarray(rng.integers(3, V, (ROWS, L + N)), jnp.int32)
  mask = np.ones((ROWS, L + N), bool)
  mask[:, :2] = False  # 6 prompt tokens, left-padded to 8
  mask = jnp.asarray(mask)

  def logp(p, ids, mask, fuse):
    if fuse:
      p = dict(p, layers=[layers.fuse_weights(cfg, lw) for lw in p["layers"]])
    h, _ = hidden_states(cfg, p, ids, mask)
    return logprobs_from_hidden(cfg, p, h[:, L - 1 : L + N - 1], ids[:, L:], mask[:, L:]).logp

  fns = {}
  for fuse in (False, True):
    suffix = ", fused" if fuse else ""
    fns["forward" + suffix] = jax.jit(lambda p, i, m, f=fuse: logp(p, i, m, f))
    fns["grad" + suffix] = jax.jit(jax.grad(lambda p, i, m, f=fuse: logp(p, i, m, f).sum()))
  for fn in fns.values():
    jax.block_until_ready(fn(params, ids, mask))
  times = {name: [] for name in fns}
  for _ in range(args.repeats):
    for name, fn in fns.items():
      t0 = time.perf_counter()
      jax.block_until_ready(fn(params, ids, mask))
      times[name].append(time.perf_counter() - t0)
  print(f"XLA_FLAGS={os.environ.get('XLA_FLAGS', '')!r}; load average {os.getloadavg()[0]:.1f}")
  for name, ts in times.items():
    t = float(np.median(ts))
    flops = model_flops(ROWS, L + N) * (3 if name.startswith("grad") else 1)
    print(f"{name:>16}: {t * 1e3:8.1f} ms  {flops / t / 1e9:6.1f} GFLOP/s")


if __name__ == "__main__":
  main()
