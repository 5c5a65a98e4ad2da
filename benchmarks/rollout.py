"""Rollouts in the RL regime: maxnorm_jax's sampler against transformers `generate` and vLLM's CPU
backend, on one checkpoint, in one run (issue 11).

Two workloads, each at 512 rows, 6 prompt tokens, temperature 1:
- fixed: 64 new tokens, eos ignored (every row makes 64 tokens);
- long-tailed: eos on, up to 512 new tokens (vocab 64, random weights: about 1/64 eos per step, so the
  lengths are roughly geometric with a long tail); each tool's length distribution is reported.
Ours runs with and without the shared prefill (64 prompts x 8 samples against 512 prompts) and, on
the long tail, with and without compaction. The decode roofline is the step's matmul FLOPs at the
FLOP/s that jitted `jnp` matmuls of the step's own shapes reach here, measured in the same run.

  JAX_PLATFORMS=cpu .venv/bin/python benchmarks/rollout.py [--model runs/bench_ckpt]
      [--bench-python .venv-bench/bin/python] [--repeats 3] [--dtype bfloat16] [--write]

--dtype bfloat16 loads the checkpoint's weights in bfloat16 in every tool (our KV cache follows the
weights; vLLM dtype="bfloat16", transformers dtype=torch.bfloat16); the roofline then times
bfloat16 x bfloat16 -> float32 matmuls, as `layers.dense` runs them.

The checkpoint is written by benchmarks/peers/make_checkpoint.py when --model does not exist; the
peers run in .venv-bench (`make bench-env`) through benchmarks/peers/{hf,vllm}_generate.py; without
that environment only our side runs.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402

from benchmarks import report  # noqa: E402
from maxnorm_jax.models import hf, layers  # noqa: E402
from maxnorm_jax.models.config import dtype_of  # noqa: E402
from maxnorm_jax.sampling import Categorical, generate  # noqa: E402

GROUP, PROMPT, FIXED_NEW = 8, 6, 64
ROWS, TAIL_NEW = 512, 512  # defaults of --rows and --tail-new-tokens
FIRST_ID = 4  # benchmarks/peers/common.py: the prompts avoid the char tokenizer's special ids 0..3


def prompts(rows: int, vocab: int, seed: int) -> np.ndarray:
  """Seeded random prompt ids [rows, PROMPT], drawn as benchmarks/peers/common.py draws them."""
  return np.random.default_rng(seed).integers(FIRST_ID, vocab, size=(rows, PROMPT)).astype(np.int32)


def length_stats(lengths: np.ndarray) -> dict:
  return {
    "mean": float(lengths.mean()),
    "p50": float(np.percentile(lengths, 50)),
    "p90": float(np.percentile(lengths, 90)),
    "p99": float(np.percentile(lengths, 99)),
    "max": int(lengths.max()),
  }


def run_ours(model, new_tokens: int, eos_id, shared: bool, compact_every: int, repeats: int, meshes) -> list[dict]:
  """Timed `generate` calls on each mesh of `meshes` (after one untimed compile call each), the meshes
  taking turns so that a slow spell of a shared machine falls on all of them; tokens = real lengths.

  meshes: the rows sharded over each one's data axis (several CPU devices, one per core, or one device).
  """
  cfg = model.config
  if shared:
    ids, g = prompts(ROWS // GROUP, cfg.vocab_size, 0), GROUP
  else:
    ids, g = np.repeat(prompts(ROWS // GROUP, cfg.vocab_size, 0), GROUP, axis=0), 1
  mask = np.ones_like(ids, bool)
  method = Categorical(1.0)

  def once(seed, mesh):
    out = generate(
      model, ids, mask, jax.random.key(seed), new_tokens, method=method, eos_id=eos_id, num_samples=g,
      compact_every=compact_every, mesh=mesh,
    )  # fmt: skip
    return jax.device_get((out.lengths, out.decode_steps, out.row_steps))

  compile_s = []
  for mesh in meshes:
    t0 = time.perf_counter()
    once(0, mesh)
    compile_s.append(time.perf_counter() - t0)
  times = [[] for _ in meshes]
  for r in range(repeats):
    for i, mesh in enumerate(meshes):
      t0 = time.perf_counter()
      lengths, steps, row_steps = once(r + 1, mesh)
      times[i].append(time.perf_counter() - t0)
  return [
    {
      "tokens": int(lengths.sum()),
      "best_s": min(t),
      "times_s": t,
      "tokens_per_s": float(lengths.sum()) / min(t),
      "median_tokens_per_s": float(lengths.sum()) / float(np.median(t)),
      "length": length_stats(np.asarray(lengths)),
      "decode_steps": int(steps),
      "row_steps": int(row_steps),
      "first_call_s": c,
    }
    for t, c in zip(times, compile_s)
  ]


def step_matmuls(cfg, rows: int) -> list[tuple[int, int, int]]:
  """The (M, K, N) matmuls of one decode step: per layer qkv, output, gate/up and down; the head."""
  e, f, h, k, d, v = (
    cfg.hidden_size,
    cfg.intermediate_size,
    cfg.num_heads,
    cfg.num_kv_heads,
    cfg.head_dim,
    cfg.vocab_size,
  )
  layer = [(rows, e, (h + 2 * k) * d), (rows, h * d, e), (rows, e, 2 * f), (rows, f, e)]
  return layer * cfg.num_layers + [(rows, e, v)]


def matmul_roofline(cfg, rows: int, dtype=jnp.float32, repeats: int = 20) -> dict:
  """Matmul FLOPs per decode step and the time jitted jnp matmuls of those shapes take here, in
  `dtype` (16-bit: float32-accumulating, as `layers.dense` runs them)."""
  f = jax.jit(layers.dense)
  seconds = {}
  for m, k, n in sorted(set(step_matmuls(cfg, rows))):
    a, b = jnp.ones((m, k), dtype), jnp.ones((k, n), dtype) * 1e-3
    f(a, b).block_until_ready()
    best = float("inf")
    for _ in range(repeats):
      t0 = time.perf_counter()
      f(a, b).block_until_ready()
      best = min(best, time.perf_counter() - t0)
    seconds[(m, k, n)] = best
  shapes = step_matmuls(cfg, rows)
  flops = sum(2 * m * k * n for m, k, n in shapes)
  step_s = sum(seconds[s] for s in shapes)
  return {
    "flops_per_step": flops,
    "matmul_s_per_step": step_s,
    "flop_per_s": flops / step_s,
    "tokens_per_s": rows / step_s,
    "by_shape": {f"{m}x{k}x{n}": 2 * m * k * n / s / 1e9 for (m, k, n), s in seconds.items()},
  }


def run_peer(
  bench_python: str, script: str, model_dir: str, new_tokens: int, eos: str, repeats: int, dtype: str
) -> dict | None:
  """One peer runner's JSON, or None (with the reason on stderr) when it failed."""
  cmd = [bench_python, script, "--model", model_dir, "--rows", str(ROWS), "--prompt-len", str(PROMPT), "--dtype", dtype]
  cmd += ["--new-tokens", str(new_tokens), "--temperature", "1.0", "--eos", eos, "--repeats", str(repeats)]
  cmd += ["--threads", str(os.cpu_count())]
  print(f"[rollout] {' '.join(cmd)}", file=sys.stderr, flush=True)
  proc = subprocess.run(cmd, capture_output=True, text=True)
  lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("{")]
  if proc.returncode != 0 or not lines:
    print(f"[rollout] {os.path.basename(script)} failed ({proc.returncode}): {proc.stderr[-2000:]}", file=sys.stderr)
    return None
  return json.loads(lines[-1])


def fmt_len(r: dict | None) -> str:
  if r is None:
    return "failed"
  s = r["length"]
  return f"mean {s['mean']:.1f}, p50 {s['p50']:.0f}, p90 {s['p90']:.0f}, p99 {s['p99']:.0f}, max {s['max']}"


def fmt_tps(r: dict | None) -> str:
  return "failed" if r is None else f"{r['tokens_per_s']:,.0f}"


def ensure_checkpoint(model_dir: str, peers_dir: str) -> None:
  if os.path.exists(os.path.join(model_dir, "config.json")):
    return
  script = os.path.join(peers_dir, "make_checkpoint.py")
  if not os.path.exists(script):
    sys.exit(f"no checkpoint at {model_dir} and no {script} to write one (it comes with benchmarks/peers)")
  subprocess.run([sys.executable, script, "--out", model_dir], check=True, env={**os.environ, "PYTHONPATH": ROOT})


def main():
  global ROWS, TAIL_NEW
  parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
  parser.add_argument("--model", default=os.path.join(ROOT, "runs", "bench_ckpt"), help="HF checkpoint directory")
  parser.add_argument("--bench-python", default=os.path.join(ROOT, ".venv-bench", "bin", "python"))
  parser.add_argument("--peers-dir", default=os.path.join(ROOT, "benchmarks", "peers"))
  parser.add_argument("--repeats", type=int, default=3, help="timed runs after one untimed first call")
  parser.add_argument("--tail-repeats", type=int, default=2, help="timed runs of the long-tailed workload")
  parser.add_argument("--compact-every", type=int, default=8)
  parser.add_argument("--rows", type=int, default=ROWS, help="rows per rollout (a multiple of 8)")
  parser.add_argument("--tail-new-tokens", type=int, default=TAIL_NEW, help="new tokens at most on the long tail")
  parser.add_argument(
    "--cpu-devices", type=int, default=os.cpu_count(),
    help="also run ours on this many CPU devices, the rows sharded over them (1: one device only)",
  )  # fmt: skip
  parser.add_argument(
    "--dtype", choices=("float32", "bfloat16"), default="float32",
    help="weights, activations and KV cache of every tool (vLLM dtype=, transformers dtype=)",
  )  # fmt: skip
  parser.add_argument("--no-peers", action="store_true")
  parser.add_argument("--write", action="store_true", help="write the section 'Rollouts' of BENCHMARKS.md")
  args = parser.parse_args()
  for flag, n in (("--repeats", args.repeats), ("--tail-repeats", args.tail_repeats)):
    if n < 1:
      parser.error(f"{flag} must be at least 1 (timed runs after the untimed first call), got {n}")
  ROWS, TAIL_NEW = args.rows, args.tail_new_tokens
  report.force_cpu_devices(args.cpu_devices)  # nothing above has started jax's backend

  ensure_checkpoint(args.model, args.peers_dir)
  dtype = dtype_of(args.dtype)
  model = hf.load(args.model, dtype=dtype)
  cfg = model.config
  with open(os.path.join(args.model, "config.json")) as f:
    eos_id = json.load(f).get("eos_token_id")
  rep, tail = args.repeats, args.tail_repeats
  ce = args.compact_every

  ours = {}
  one, nd = jax.make_mesh((1,), ("data",)), jax.device_count()
  for name, new, eos, shared, compact, r in [
    ("fixed shared", FIXED_NEW, None, True, 0, rep),
    ("fixed chunked", FIXED_NEW, None, True, ce, rep),
    ("fixed unshared", FIXED_NEW, None, False, 0, rep),
    ("tail compact", TAIL_NEW, eos_id, True, ce, tail),
    ("tail no-compact", TAIL_NEW, eos_id, True, 0, tail),
  ]:
    print(f"[rollout] ours: {name}", file=sys.stderr, flush=True)
    paired = nd > 1 and name in ("fixed shared", "tail compact")  # taking turns with all devices
    meshes = (one, jax.make_mesh((nd,), ("data",))) if paired else (one,)
    results = run_ours(model, new, eos, shared, compact, r, meshes)
    ours[name] = results[0]
    if paired:
      ours[name.split()[0] + " devices"] = results[1]
  roof = matmul_roofline(cfg, ROWS, dtype)

  peers: dict[str, dict | None] = {}
  have_peers = os.path.exists(args.bench_python) and not args.no_peers
  if not have_peers and not args.no_peers:
    print(
      f"[rollout] {args.bench_python} is missing: only our side runs (make bench-env builds the peers' environment)",
      file=sys.stderr,
    )
  if have_peers:
    for peer, script in [("transformers", "hf_generate.py"), ("vLLM CPU", "vllm_generate.py")]:
      path = os.path.join(args.peers_dir, script)
      peers[(peer, "fixed")] = run_peer(args.bench_python, path, args.model, FIXED_NEW, "off", rep, args.dtype)
      peers[(peer, "tail")] = run_peer(args.bench_python, path, args.model, TAIL_NEW, "on", tail, args.dtype)
  load = os.getloadavg()
  raw = {"ours": ours, "roofline": roof, "peers": {f"{k[0]} {k[1]}": v for k, v in peers.items()}, "load": load}
  print(json.dumps(raw, default=str), file=sys.stderr, flush=True)  # the raw figures, before any formatting

  fixed = ours["fixed shared"]
  step_s = fixed["best_s"] / FIXED_NEW
  lines = [
    f"Checkpoint: {args.model} (random Qwen3: {cfg.num_layers} layers, width {cfg.hidden_size}, "
    f"{cfg.num_heads} heads / {cfg.num_kv_heads} kv heads of {cfg.head_dim}, mlp {cfg.intermediate_size}, "
    f"vocab {cfg.vocab_size}, {args.dtype}). {ROWS} rows, {PROMPT} prompt tokens, temperature 1; best of "
    f"{rep} timed runs (long tail: {tail}) after one untimed run; tokens/s counts real completion tokens; "
    f"{os.cpu_count()} threads everywhere. Load average at the end: {load[0]:.2f}, {load[1]:.2f}, {load[2]:.2f}.",
    "",
    f"| | fixed: {FIXED_NEW} new tokens, eos ignored (tokens/s) | long tail: eos on, up to {TAIL_NEW} "
    "(tokens/s) | long-tail lengths |",
    "|---|---|---|---|",
    f"| maxnorm_jax, shared prefill, one loop (compact_every=0) | {fmt_tps(fixed)} | "
    f"{fmt_tps(ours['tail no-compact'])} | {fmt_len(ours['tail no-compact'])} |",
    f"| maxnorm_jax, shared prefill, chunks of {ce} steps (compaction) | "
    f"{fmt_tps(ours['fixed chunked'])} | {fmt_tps(ours['tail compact'])} | {fmt_len(ours['tail compact'])} |",
    f"| maxnorm_jax, no shared prefill (512 prompts) | {fmt_tps(ours['fixed unshared'])} | | |",
  ]
  if "fixed devices" in ours:
    lines.append(
      f"| maxnorm_jax, rows over {nd} CPU devices (fixed: one loop; tail: compaction) | "
      f"{fmt_tps(ours['fixed devices'])} | {fmt_tps(ours['tail devices'])} | {fmt_len(ours['tail devices'])} |"
    )
  for peer in ("transformers", "vLLM CPU"):
    if have_peers:
      lines.append(
        f"| {peer} | {fmt_tps(peers[(peer, 'fixed')])} | {fmt_tps(peers[(peer, 'tail')])} | "
        f"{fmt_len(peers[(peer, 'tail')])} |"
      )
  lines.append(
    f"| decode roofline (matmul FLOPs at the measured jnp matmul FLOP/s) | {roof['tokens_per_s']:,.0f} | | |"
  )
  lines += ["", f"- Roofline: {roof['flops_per_step'] / 1e9:.2f} GFLOP of matmul per decode step at {ROWS} rows; "
            f"jitted jnp matmuls of those shapes run at {roof['flop_per_s'] / 1e9:.0f} GFLOP/s here ("
            + ", ".join(f"{k}: {v:.0f}" for k, v in roof["by_shape"].items())
            + f"), i.e. {1e3 * roof['matmul_s_per_step']:.1f} ms per step; ours takes "
            f"{1e3 * step_s:.1f} ms per decode step of {ROWS} rows (prefill included): "
            f"{100 * fixed['tokens_per_s'] / roof['tokens_per_s']:.0f}% of the roofline (target 50%)."]  # fmt: skip
  if "fixed devices" in ours:
    fd = ours["fixed devices"]
    lines.append(
      f"- Rows over {nd} CPU devices (fixed, the two taking turns): {fd['tokens_per_s'] / fixed['tokens_per_s']:.2f}x "
      f"one device by the best run, {fd['median_tokens_per_s'] / fixed['median_tokens_per_s']:.2f}x by the median "
      f"({', '.join(f'{t:.2f}' for t in fd['times_s'])} s against {', '.join(f'{t:.2f}' for t in fixed['times_s'])} s); "
      f"{100 * fd['tokens_per_s'] / roof['tokens_per_s']:.0f}% of the roofline."
    )
  for peer in ("transformers", "vLLM CPU"):
    r = peers.get((peer, "fixed"))
    if r is not None and "fixed devices" in ours:
      td = peers.get((peer, "tail"))
      lines.append(
        f"- Ours over {nd} CPU devices against {peer}: fixed "
        f"{ours['fixed devices']['tokens_per_s'] / r['tokens_per_s']:.2f}x"
        + (f", long tail {ours['tail devices']['tokens_per_s'] / td['tokens_per_s']:.2f}x" if td else "")
        + " (target 2x)."
      )
    if r is not None:
      t = peers.get((peer, "tail"))
      best_tail = max(ours["tail compact"]["tokens_per_s"], ours["tail no-compact"]["tokens_per_s"])
      tail_ratio = f", long tail {best_tail / t['tokens_per_s']:.2f}x" if t else ""
      lines.append(
        f"- Ours against {peer}: fixed {fixed['tokens_per_s'] / r['tokens_per_s']:.2f}x{tail_ratio} (target 2x)."
      )
  tc, tn = ours["tail compact"], ours["tail no-compact"]
  lines += [
    f"- Compaction (long tail): {tc['row_steps']:,} row-steps computed against {tn['row_steps']:,} without "
    f"({tn['decode_steps']} decode steps), {tc['tokens_per_s'] / tn['tokens_per_s']:.2f}x the tokens/s; "
    f"fixed workload: chunked {ours['fixed chunked']['tokens_per_s'] / fixed['tokens_per_s']:.2f}x the one loop "
    "(no row ends there, so this is the chunks' own cost).",
    f"- Shared prefill (fixed): {fixed['tokens_per_s'] / ours['fixed unshared']['tokens_per_s']:.2f}x the tokens/s "
    "of prefilling all 512 rows (the prompts are 6 tokens, so the prefill is a small part of a rollout).",
    "- First calls (compile included), s: " + ", ".join(f"{k} {v['first_call_s']:.1f}" for k, v in ours.items()) + ".",
  ]
  for (peer, kind), r in peers.items():
    if r is not None and "startup_s" in r:
      lines.append(f"- {peer} {kind}: engine start {r['startup_s']:.1f} s (not counted).")
  body = "\n".join(lines)
  print(body)
  if args.write:
    flag, title = ("", "") if args.dtype == "float32" else (f" --dtype {args.dtype}", f", {args.dtype}")
    cmd = "JAX_PLATFORMS=cpu .venv/bin/python benchmarks/rollout.py --write" + flag
    report.update_section("Rollouts" + title, report.header(cmd) + "\n" + body)


if __name__ == "__main__":
  main()
