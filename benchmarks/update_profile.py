"""Where the PPO update's time goes at issue 11's shape, against the matmuls it must do.

    python benchmarks/update_profile.py [--repeats 3]

Shape: 64 prompts x 8 samples = 512 rows, 6 prompt tokens (left-padded to 8), 64 new tokens, a random
4-layer decoder of width 256 (4 heads / 2 kv heads of 64, MLP 768, vocabulary 64), beta 0.01 with
k3 KL in the loss, 4 minibatches, GRPO-style advantages. Measured in one process, medians of
`--repeats` calls after a compiling one:

- update: the jitted `train.step.update_fn` (4 optimiser steps, donated state)
- grad: forward + backward of one minibatch's loss (`_minibatch_terms`), times 4
- forward: the decoder's forward pass (`hidden_states` + log-probs) of one minibatch, times 4
- matmuls: the same matmuls alone (projections, attention scores and values, MLP, head), forward
  and backward, times 4: the floor the update could reach on this machine
- matmul peak: a 512x256x768 float32 matmul, the GFLOP/s the FLOP count is divided by
"""

from __future__ import annotations

import argparse
import os
import sys
import time

import jax
import jax.numpy as jnp
import numpy as np
import optax

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from maxnorm_jax.models import ModelConfig, create_model  # noqa: E402
from maxnorm_jax.models.decoder import hidden_states  # noqa: E402
from maxnorm_jax.models.logprobs import logprobs_from_hidden  # noqa: E402
from maxnorm_jax.parallel import DEFAULT_RULES, make_mesh, rows_array  # noqa: E402
from maxnorm_jax.train import step as step_lib  # noqa: E402
from maxnorm_jax.train.state import create_train_state, state_shardings  # noqa: E402

P, G, L, N, V = 64, 8, 8, 64, 64
E, F, LAYERS, H, KV, D = 256, 768, 4, 4, 2, 64
MINIBATCHES = 4


def _median_time(fn, repeats: int) -> float:
  jax.block_until_ready(fn())
  times = []
  for _ in range(repeats):
    t0 = time.perf_counter()
    jax.block_until_ready(fn())
    times.append(time.perf_counter() - t0)
  return float(np.median(times))


def model_flops(rows: int, tokens: int) -> float:
  """Forward matmul FLOPs of `rows` sequences of `tokens` (attention over the whole sequence)."""
  per_token = 2 * LAYERS * (E * H * D + 2 * E * KV * D + H * D * E + 3 * E * F) + 2 * E * V
  attention = 2 * 2 * LAYERS * H * D * tokens  # scores and values, every query against every key
  return rows * tokens * (per_token + attention)


def matmul_only(ws, x):
  """The decoder's matmuls without norms, RoPE, masking, softmax or SwiGLU's nonlinearity."""
  b, t, _ = x.shape
  for w in ws["layers"]:
    q = jnp.einsum("bte,ehd->bhtd", x, w["q"])
    k = jnp.einsum("bte,ekd->bktd", x, w["k"])
    v = jnp.einsum("bte,ekd->bktd", x, w["v"])
    k, v = jnp.repeat(k, H // KV, axis=1), jnp.repeat(v, H // KV, axis=1)
    s = jnp.einsum("bhtd,bhsd->bhts", q, k)
    a = jnp.einsum("bhts,bhsd->bthd", s, v)
    x = x + jnp.einsum("bthd,hde->bte", a, w["o"])
    x = x + jnp.einsum(
      "btf,fe->bte", jnp.einsum("bte,ef->btf", x, w["g"]) * jnp.einsum("bte,ef->btf", x, w["u"]), w["d"]
    )
  return jnp.sum(jnp.einsum("bte,ev->btv", x, ws["head"]))


def main():
  parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
  parser.add_argument("--repeats", type=int, default=3)
  args = parser.parse_args()
  mesh = make_mesh({"data": -1})
  cfg = ModelConfig.tiny(
    V, hidden_size=E, intermediate_size=F, num_layers=LAYERS, num_heads=H, num_kv_heads=KV, head_dim=D
  )
  params = create_model(cfg, mesh, DEFAULT_RULES, seed=0).weights()
  rng = np.random.default_rng(0)
  b = P * G
  prompt_mask = np.ones((b, L), bool)
  prompt_mask[:, :2] = False  # 6 prompt tokens
  rows = lambda x: rows_array(x, mesh, DEFAULT_RULES)  # noqa: E731
  ids, pm = rows(rng.integers(3, V, (b, L)).astype(np.int32)), rows(prompt_mask)
  tokens, tmask = rows(rng.integers(3, V, (b, N)).astype(np.int32)), rows(np.ones((b, N), bool))
  old, _ = step_lib.sequence_logprobs(cfg, 1.0, params, ids, pm, tokens, tmask)
  adv = rng.normal(size=b).astype(np.float32)
  batch = step_lib.Rollout(
    prompt_ids=ids,
    prompt_mask=pm,
    tokens=tokens,
    mask=tmask,
    loss_mask=tmask,
    old_logp=old,
    ref_logp=old,
    advantages=rows(adv),
    kl_weight=rows(np.ones(b, np.float32)),
    takes_part=rows(np.ones(b, bool)),
  )
  opt = optax.adamw(1e-6)
  spec = step_lib.UpdateSpec(
    model=cfg,
    mesh=mesh,
    rules=DEFAULT_RULES,
    optimizer=opt,
    temperature=1.0,
    surrogate="ppo",
    aggregation="token-mean",
    kl_kind="k3",
    kl_in_loss=True,
    dual_clip=None,
    ppo_epochs=1,
    minibatches=MINIBATCHES,
    grad_accum=1,
  )
  hp = {
    k: jnp.float32(v) for k, v in dict(clip_low=0.2, clip_high=0.2, beta=0.01, entropy_coef=0.0, aux_coef=0.0).items()
  }
  state = create_train_state(jax.tree.map(jnp.copy, params), opt, 0, {}, mesh)
  update = step_lib.update_fn(spec, state_shardings(state))
  holder = [state]

  def run_update():
    holder[0], metrics = update(holder[0], batch, hp)
    return metrics

  mb = jax.tree.map(lambda x: x[: b // MINIBATCHES], batch)
  grad = jax.jit(jax.grad(lambda p, mb: step_lib._minibatch_terms(spec, p, mb, hp)[0]))

  @jax.jit
  def forward(p, mb):  # the batch is an argument: a closed-over one would be constant-folded
    x_ids = jnp.concatenate([mb.prompt_ids, mb.tokens], 1)
    attn = jnp.concatenate([mb.prompt_mask, mb.mask], 1)
    h, _ = hidden_states(cfg, p, x_ids, attn)
    return logprobs_from_hidden(cfg, p, h[:, L - 1 : L + N - 1], mb.tokens, mb.mask).logp

  ws = {
    "layers": [
      {
        "q": jnp.asarray(rng.normal(size=(E, H, D)), jnp.float32) * 0.02,
        "k": jnp.asarray(rng.normal(size=(E, KV, D)), jnp.float32) * 0.02,
        "v": jnp.asarray(rng.normal(size=(E, KV, D)), jnp.float32) * 0.02,
        "o": jnp.asarray(rng.normal(size=(H, D, E)), jnp.float32) * 0.02,
        "g": jnp.asarray(rng.normal(size=(E, F)), jnp.float32) * 0.02,
        "u": jnp.asarray(rng.normal(size=(E, F)), jnp.float32) * 0.02,
        "d": jnp.asarray(rng.normal(size=(F, E)), jnp.float32) * 0.02,
      }
      for _ in range(LAYERS)
    ],
    "head": jnp.asarray(rng.normal(size=(E, V)), jnp.float32) * 0.02,
  }
  x = jnp.asarray(rng.normal(size=(b // MINIBATCHES, L + N, E)), jnp.float32)
  mm_grad = jax.jit(jax.grad(matmul_only))
  a = jnp.asarray(rng.normal(size=(512, 256)), jnp.float32)
  w = jnp.asarray(rng.normal(size=(256, 768)), jnp.float32)
  peak_fn = jax.jit(lambda a, w: a @ w)

  peak_t = _median_time(lambda: peak_fn(a, w), 20)
  peak = 2 * 512 * 256 * 768 / peak_t / 1e9
  flops = 3 * model_flops(b, L + N)  # forward + backward (twice the forward) of every row once
  results = {  # name: (seconds, the matmul FLOPs that work needs)
    "update": (_median_time(run_update, args.repeats), flops),
    "grad x4": (MINIBATCHES * _median_time(lambda: grad(params, mb), args.repeats), flops),
    "forward x4": (MINIBATCHES * _median_time(lambda: forward(params, mb), args.repeats), flops / 3),
    "matmuls fwd+bwd x4": (MINIBATCHES * _median_time(lambda: mm_grad(ws, x), args.repeats), flops),
  }
  print(f"matmul peak {peak:.0f} GFLOP/s; update FLOPs {flops / 1e9:.0f} G (ideal {flops / peak / 1e9:.2f} s)")
  print(f"load average {os.getloadavg()[0]:.1f}, {jax.devices()[0].device_kind}")
  for name, (t, f) in results.items():
    print(f"{name:>20}: {t:6.2f} s  ({f / t / 1e9 / peak:.0%} of the matmul peak)")


if __name__ == "__main__":
  main()
