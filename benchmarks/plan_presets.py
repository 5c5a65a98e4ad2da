"""PLAN.md's table: every model preset with its mesh preset on its topology, at the seeds' RL shapes.

    python benchmarks/plan_presets.py --out runs/plan [--jobs 3] [--only qwen3-32b] [--shapes g8_4k,g16_8k]

Runs `python -m maxnorm_jax.plan --json` (bf16 parameters and compute, prompts of up to 1,024
tokens, completions of 4,096 or 8,192, groups of 8 or 16, the config's 64 prompts a step) for each
(preset, shape) in a subprocess, `--jobs` at a time, into OUT/<preset>_<shape>.json (a run whose
file exists is skipped), then prints the markdown table. Deep models are planned from compiles
with 2 and 4 layers (`--layers=2,4`, `maxnorm_jax.plan.extrapolate`); `--full NAME` compiles NAME
at its real depth as well, to check the extrapolation.
"""

import argparse
import concurrent.futures as cf
import importlib.util
import json
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SHAPES = {  # name: (group size, completion tokens)
  "g8_4k": (8, 4096),
  "g16_4k": (16, 4096),
  "g8_8k": (8, 8192),
  "g16_8k": (16, 8192),
}
BASE = {"model.param_dtype": "bfloat16", "model.dtype": "bfloat16", "data.max_prompt_len": 1024}


def presets() -> dict:
  spec = importlib.util.spec_from_file_location("default_config", os.path.join(ROOT, "configs", "default.py"))
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  return {k: v for k, v in module.MODELS.items() if v["kind"] == "hf"}


def command(preset: str, shape: str, extra: dict, layers: str) -> list[str]:
  g, n = SHAPES[shape]
  values = dict(BASE, **{"rollout.group_size": g, "rollout.max_new_tokens": n}, **extra)
  cmd = [sys.executable, "-m", "maxnorm_jax.plan", f"--config=configs/default.py:model={preset},task=math500", "--json"]
  cmd += [f"--config.{k}={v}" for k, v in values.items()]
  return cmd + ([f"--layers={layers}"] if layers else [])


def run(cmd: list[str], path: str) -> str:
  if os.path.exists(path):
    return f"{path} (kept)"
  env = dict(os.environ, PYTHONPATH=ROOT, JAX_PLATFORMS="cpu")
  proc = subprocess.run(["nice", "-n", "15", *cmd], cwd=ROOT, env=env, capture_output=True, text=True)
  if proc.returncode not in (0, 1):
    with open(path + ".err", "w") as f:
      f.write(" ".join(cmd) + "\n" + proc.stderr)
    return f"{path}: exit {proc.returncode}"
  with open(path, "w") as f:
    f.write(proc.stdout)
  with open(path + ".cmd", "w") as f:
    f.write(" ".join(cmd[1:]) + "\n")
  return f"{path}: exit {proc.returncode}"


def table(out: str) -> str:
  rows = [
    "| preset | topology (chips) | mesh | shape | fits | peak GiB/chip (piece) | params+opt GiB/chip | KV GiB/chip "
    "| est. step s | MFU | depth |",
    "|---|---|---|---|---|---|---|---|---|---|---|",
  ]
  for name in sorted(os.listdir(out)):
    if not name.endswith(".json"):
      continue
    with open(os.path.join(out, name)) as f:
      s = json.load(f)
    sh = s["shapes"]
    mesh = "x".join(f"{k}{v}" for k, v in s["mesh"].items() if v > 1)
    gib = 1024**3
    depth = "{}-layer line from {}".format(s.get("num_layers", "?"), s["extrapolated_from_layers"])
    depth = depth if "extrapolated_from_layers" in s else "full compile"
    rows.append(
      f"| {s['model']} | {s['topology']} ({s['chips']}) | {mesh} | {sh['prompts']}x{sh['group_size']}, "
      f"{sh['prompt_len']}+{sh['new_tokens']} | {'yes' if s['fits'] else '**no**'} | "
      f"{s['peak_bytes_per_chip'] / gib:.1f} ({s['peak_piece']}) | "
      f"{(s['param_bytes_per_chip'] + s['opt_state_bytes_per_chip']) / gib:.1f} | "
      f"{s['kv_cache_bytes_per_chip'] / gib:.1f} | {s['est_step_s']:.1f} | {s['mfu']:.0%} | {depth} |"
    )
  return "\n".join(rows)


def main():
  ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  ap.add_argument("--out", default="runs/plan")
  ap.add_argument("--jobs", type=int, default=1)
  ap.add_argument("--only", default="", help="comma-separated presets")
  ap.add_argument("--shapes", default=",".join(SHAPES))
  ap.add_argument(
    "--runs", default="", help="comma-separated preset:shape pairs, run in this order (instead of the grid)"
  )
  ap.add_argument("--full", default="", help="comma-separated presets also compiled at full depth (shape g8_4k)")
  ap.add_argument("--set", action="append", default=[], help="extra config override key=value (all runs)")
  ap.add_argument("--table", action="store_true", help="only print the table of OUT")
  a = ap.parse_args()
  os.makedirs(a.out, exist_ok=True)
  if not a.table:
    extra = dict(kv.split("=", 1) for kv in a.set)
    names = [p for p in presets() if not a.only or p in a.only.split(",")]
    jobs = [
      (command(p, s, extra, "2,4"), os.path.join(a.out, f"{p}_{s}.json")) for p in names for s in a.shapes.split(",")
    ]
    for p in filter(None, a.full.split(",")):
      jobs.append((command(p, "g8_4k", extra, ""), os.path.join(a.out, f"{p}_g8_4k_full.json")))
    with cf.ThreadPoolExecutor(a.jobs) as pool:
      for line in pool.map(lambda j: run(*j), jobs):
        print(line, flush=True)
  print(table(a.out))


if __name__ == "__main__":
  main()
