"""The time of one RL step, split into generation, verification, log-probs and update, and the
fraction of the step the device waits for the verifier (target: under 10%).

    python benchmarks/step.py [--steps 40] [--write]

Each scenario runs the trainer (`maxnorm_jax.train.train`) from configs/default.py on this machine's
devices, without SFT, evaluation or checkpoints, and reports medians over the steps after the first
few (which compile). `time/verify` is the host's wait for the verifier pool after the device work
was dispatched; `time/device_wait_verifier` is the part of that wait after the old and reference
log-prob passes had finished, i.e. the time the device sat idle for the verifier.
"""

import argparse
import os
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
KEYS = ("time/generate", "time/verify", "time/logprobs", "time/update", "time/step", "time/device_wait_verifier")


def load_config(arg: str):
  import importlib.util

  path = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "configs", "default.py")
  spec = importlib.util.spec_from_file_location("default_config", path)
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  return module.get_config(arg)


def run_scenario(arg: str, overrides: dict, steps: int, skip: int) -> dict:
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
  for key, value in overrides.items():
    section, name = key.split(".")
    c[section][name] = value
  with tempfile.TemporaryDirectory() as workdir:
    rows = train(c, workdir)[1:] if c.eval.every else train(c, workdir)
  rows = [r for r in rows if r["step"] > skip]
  out = {k: float(np.median([r[k] for r in rows])) for k in KEYS}
  out["wait_frac"] = float(np.median([r["time/device_wait_verifier_frac"] for r in rows]))
  out["batch"] = f"{c.data.batch_size} x {c.rollout.group_size}, {c.rollout.max_new_tokens} new tokens"
  return out


def main():
  parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
  parser.add_argument("--steps", type=int, default=40)
  parser.add_argument("--skip", type=int, default=5, help="first steps left out (compilation)")
  parser.add_argument("--write", action="store_true", help="record the result in BENCHMARKS.md")
  args = parser.parse_args()
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
