"""The time of one RL step, split into generation, verification, log-probs and update, and the
fraction of the step the device waits for the verifier (target: under 10%).

    python benchmarks/step.py [--steps 40] [--write]
    python benchmarks/step.py --vs-trl [--steps 8 --skip 3] [--trl-steps 4] [--cpu-devices 2]
        [--dtype bfloat16] [--grad-accum 1 4] [--write]

Each scenario runs the trainer (`maxnorm_jax.train.train`) from configs/default.py on this machine's
devices, without SFT, evaluation or checkpoints, and reports medians over the steps after the first
few (which compile). `time/verify` is the host's wait for the verifier pool after the device work
was dispatched; `time/device_wait_verifier` is the part of that wait after the old and reference
log-prob passes had finished, i.e. the time the device sat idle for the verifier.

--vs-trl (issue 11) writes the peer checkpoint (benchmarks/peers/make_checkpoint.py: a random Qwen3 of
4 layers, width 256), runs this trainer on it at 64 prompts x 8 samples, 6 prompt tokens, 64 new tokens at
T=1, beta 0.01, 4 minibatches, grpo, and then TRL's GRPOTrainer at the same shape in .venv-bench
(`make bench-env`; benchmarks/peers/trl_step.py), one after the other, and prints both side by side.
--dtype bfloat16 runs both forward and backward passes in bfloat16 with float32 weights and optimizer
state: ours with model.dtype=bfloat16, TRL with bf16=True (torch's CPU autocast). --grad-accum A [A ...]
runs both tools once for each A, with each optimizer step's gradient gathered over A microbatches and
the reference log-probs scored in passes of as many rows (the same numbers, smaller passes), and
compares each with TRL at the same A and with TRL's fastest.
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from benchmarks import report  # noqa: E402

SCENARIOS = {
  # name: (config argument, overrides, what the verifier does)
  "arith_digits (default)": ("", {}, "built-in digit check"),
  "gsm8k sample": (
    "task=gsm8k",
    {"data.max_prompt_len": 256, "rollout.max_new_tokens": 32},
    "math-verify in killable workers",
  ),
}
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# Issue 11's whole-step shape, on the checkpoint of benchmarks/peers/make_checkpoint.py.
VS_TRL = dict(prompts=64, group=8, prompt_len=6, new_tokens=64, beta=0.01, minibatches=4)
DTYPES = {
  "float32": "float32",
  "bfloat16": "bfloat16 passes over float32 weights (ours model.dtype=bfloat16, TRL bf16=True)",
}
KEYS = ("time/generate", "time/verify", "time/logprobs", "time/update", "time/step", "time/device_wait_verifier")


def load_config(arg: str):
  import importlib.util

  path = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "configs", "default.py")
  spec = importlib.util.spec_from_file_location("default_config", path)
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  return module.get_config(arg)


def apply_overrides(c, overrides: dict) -> None:
  """Sets each "section.name" key of `overrides` on the config `c`."""
  for key, value in overrides.items():
    section, name = key.split(".")
    c[section][name] = value


def run_scenario(arg: str, overrides: dict, steps: int, skip: int) -> dict:
  """Medians of KEYS (and the verifier wait fraction, completion length) over the steps after `skip`."""
  from maxnorm_jax.train import train

  c = load_config(arg)
  c.train.steps = steps
  c.sft.steps = 0
  c.eval.every = 0
  c.checkpoint.every = 0
  c.log.progress = False
  c.log.tensorboard = False
  c.log.cards_every = 0
  c.log.diagnostics_every = 0
  apply_overrides(c, overrides)
  with tempfile.TemporaryDirectory() as workdir:
    rows = train(c, workdir)[1:] if c.eval.every else train(c, workdir)
  rows = [r for r in rows if r["step"] > skip]
  out = {k: float(np.median([r[k] for r in rows])) for k in KEYS}
  out["wait_frac"] = float(np.median([r["time/device_wait_verifier_frac"] for r in rows]))
  out["response_len_mean"] = float(np.mean([r["response_len_mean"] for r in rows]))
  out["batch"] = f"{c.data.batch_size} x {c.rollout.group_size}, {c.rollout.max_new_tokens} new tokens"
  return out


def vs_trl_overrides(ckpt: str, grad_accum: int = 1) -> dict:
  """This trainer at VS_TRL's shape on the checkpoint `ckpt` (config overrides over method=grpo).

  grad_accum A: each minibatch's gradient gathered over A microbatches, and the reference log-prob
  pass run in passes of the same rows (TRL scores in passes of its per-device batch), so the math is
  the same and only the size of the passes changes.

  The built-in arith_digits prompts are mostly 6 characters, 6 tokens of the checkpoint's character
  tokenizer; the longer ones are skipped. The sampler stops a row at EOS (the config has no switch to ignore it); the
  step's shapes are static at 64 new tokens, so the work does not depend on where rows end.
  """
  v = VS_TRL
  return {
    "model.kind": "hf",
    "model.path": ckpt,
    "data.tokenizer": ckpt,  # its tokenizer.json: the char tokenizer's ids, plus one so that all 64 decode
    "data.prompt_format": "plain",
    "data.max_prompt_len": v["prompt_len"],
    "data.skip_bad_rows": True,
    "data.batch_size": v["prompts"],
    "rollout.group_size": v["group"],
    "rollout.max_new_tokens": v["new_tokens"],
    "rollout.temperature": 1.0,
    "loss.beta": v["beta"],
    "train.minibatches": v["minibatches"],
    "train.grad_accum": grad_accum,
    "train.logprob_microbatches": v["minibatches"] * grad_accum,
    "train.ppo_epochs": 1,
  }


def run_trl(ckpt: str, steps: int, python: str, dtype: str, grad_accum: int = 1) -> dict:
  """benchmarks/peers/trl_step.py at VS_TRL's shape in the peers' environment -> its JSON."""
  v = VS_TRL
  cmd = [python, os.path.join(ROOT, "benchmarks", "peers", "trl_step.py"), "--model", ckpt, "--steps", str(steps)]
  cmd += ["--bf16"] if dtype == "bfloat16" else []
  cmd += ["--grad-accum", str(grad_accum)]
  for key in ("prompts", "group", "prompt_len", "new_tokens", "beta", "minibatches"):
    cmd += ["--" + key.replace("_", "-"), str(v[key])]
  print("running " + " ".join(cmd), file=sys.stderr, flush=True)
  out = subprocess.run(cmd, stdout=subprocess.PIPE, check=True, text=True).stdout
  return json.loads(out.strip().splitlines()[-1])


def vs_trl(args) -> str:
  """Both whole steps on one checkpoint -> the markdown section."""
  import jax

  from benchmarks.peers.make_checkpoint import make_checkpoint

  python = args.bench_python
  if not os.path.exists(python):
    raise SystemExit(f"{python} does not exist; run `make bench-env` first")
  make_checkpoint(args.ckpt, seed=0)
  v = VS_TRL
  rows = v["prompts"] * v["group"]
  ours, trl = {}, {}
  for a in args.grad_accum:  # ours, then TRL, at each microbatch size
    overrides = vs_trl_overrides(args.ckpt, a) | {"model.dtype": args.dtype}
    ours[a] = run_scenario("method=grpo", overrides, args.steps, args.skip)
    trl[a] = run_trl(args.ckpt, args.trl_steps, python, args.dtype, a)
  best = min(t["median_s"] for t in trl.values())
  micro = {a: rows // (v["minibatches"] * a) for a in args.grad_accum}  # rows per pass
  lines = [
    "| trainer | rows per pass | generate | log-probs (reference; old ones from the sampler) | update | step "
    "| step vs TRL, same passes | step vs TRL's best |",
    "|---|---|---|---|---|---|---|---|",
  ]
  for a in args.grad_accum:
    o, t = ours[a], trl[a]
    lines.append(
      f"| maxnorm_jax (`train`, grpo) | {micro[a]} | {o['time/generate']:.2f} s | {o['time/logprobs']:.2f} s | "
      f"{o['time/update']:.2f} s | {o['time/step']:.2f} s | {t['median_s'] / o['time/step']:.2f}x | "
      f"{best / o['time/step']:.2f}x |"
    )
  for a in args.grad_accum:
    t = trl[a]
    lines.append(
      f"| TRL {t['version']} `GRPOTrainer` (torch {t['torch']}, transformers {t['transformers']}) | {micro[a]} "
      f"| | | | {t['median_s']:.2f} s ({', '.join(f'{s:.2f}' for s in t['step_s'])}) | 1x | |"
    )
  body = report.header() + f"Devices: {jax.device_count()} x {jax.devices()[0].platform}\n"
  body += f"Load average before / after: {args.load_before} / {load_average()}\n\n" + "\n".join(lines)
  body += (
    f"\n\nOne step: {v['prompts']} prompts x {v['group']} samples = {rows} rows, {v['prompt_len']} prompt "
    f"tokens, {v['new_tokens']} new tokens at T=1, beta {v['beta']}, {v['minibatches']} optimizer steps on "
    f"{rows // v['minibatches']}-row minibatches, {DTYPES[args.dtype]}, on the random Qwen3 checkpoint of "
    "benchmarks/peers/make_checkpoint.py (4 layers, width 256, vocab 64). Rows per pass: each optimizer "
    "step's gradient is gathered over microbatches of that many rows and the reference log-probs are "
    "scored in passes of as many (ours: train.grad_accum, train.logprob_microbatches; TRL: "
    "per_device_train_batch_size, gradient_accumulation_steps). Ours: medians over steps "
    f"{args.skip + 1}..{args.steps} (mean completion length "
    f"{np.mean([o['response_len_mean'] for o in ours.values()]):.1f}: rows stop at EOS, the shapes stay at "
    f"{v['new_tokens']}). TRL: median of its steps after the first (in brackets, all of them; EOS "
    f"suppressed, every completion {v['new_tokens']} tokens). Step vs TRL: TRL's step time over ours "
    "(above 1: ours is faster), with the same rows per pass and against TRL's fastest row of the table.\n"
  )
  return body


def load_average() -> str:
  return ", ".join(f"{x:.2f}" for x in os.getloadavg())


def main():
  parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
  parser.add_argument("--steps", type=int, default=None, help="RL steps (default 40; 8 with --vs-trl)")
  parser.add_argument("--skip", type=int, default=None, help="first steps left out (compilation; default 5, 3)")
  parser.add_argument("--write", action="store_true", help="record the result in BENCHMARKS.md")
  parser.add_argument("--vs-trl", action="store_true", help="issue 11's step on one checkpoint, beside TRL's")
  parser.add_argument("--trl-steps", type=int, default=4, help="--vs-trl: TRL's RL steps (the first is a warm-up)")
  parser.add_argument("--ckpt", default=os.path.join(ROOT, "runs", "bench_ckpt"), help="--vs-trl: checkpoint dir")
  parser.add_argument(
    "--cpu-devices", type=int, default=1,
    help="split the host CPU into this many jax devices; the trainer's data axis takes them all",
  )  # fmt: skip
  parser.add_argument("--dtype", choices=sorted(DTYPES), default="float32", help="--vs-trl: the passes' dtype")
  parser.add_argument(
    "--grad-accum", type=int, nargs="+", default=[1],
    help="--vs-trl: microbatches per optimizer step, one pair of runs (ours, TRL) for each",
  )  # fmt: skip
  parser.add_argument("--bench-python", default=os.path.join(ROOT, ".venv-bench", "bin", "python"))
  args = parser.parse_args()
  args.load_before = load_average()
  report.force_cpu_devices(args.cpu_devices)  # before anything starts jax's backend
  if args.vs_trl:
    args.steps = args.steps or 8
    args.skip = args.skip if args.skip is not None else 3
    body = vs_trl(args)
    print(body)
    if args.write:
      report.update_section("RL step against TRL" + ("" if args.dtype == "float32" else f", {args.dtype}"), body)
    return
  args.steps = args.steps or 40
  args.skip = args.skip if args.skip is not None else 5
  import jax

  lines = [
    "| scenario | batch | generate | verify (host wait) | log-probs | update | step | device waits for verifier |",
    "|---|---|---|---|---|---|---|---|",
  ]
  for name, (arg, overrides, verifier) in SCENARIOS.items():
    r = run_scenario(arg, overrides, args.steps, args.skip)
    lines.append(
      f"| {name} ({verifier}) | {r['batch']} | {r['time/generate'] * 1e3:.0f} ms | "
      f"{r['time/verify'] * 1e3:.0f} ms | {r['time/logprobs'] * 1e3:.0f} ms | "
      f"{r['time/update'] * 1e3:.0f} ms | {r['time/step'] * 1e3:.0f} ms | "
      f"{r['time/device_wait_verifier'] * 1e3:.0f} ms ({100 * r['wait_frac']:.1f}%) |"
    )
    print(lines[-1], flush=True)
  body = report.header() + f"Devices: {jax.device_count()} x {jax.devices()[0].platform}\n\n" + "\n".join(lines)
  body += (
    "\n\nMedians over steps {s}..{n}. Log-probs: the old and reference passes; they are dispatched before "
    "the host waits for the verifier pool, so `verify` overlaps them. Target: the device waits for the "
    "verifier for under 10% of the step.\n"
  ).format(s=args.skip + 1, n=args.steps)
  print(body)
  if args.write:
    report.update_section("RL step", body)


if __name__ == "__main__":
  main()
