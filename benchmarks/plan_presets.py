"""PLAN.md's table: every model preset with its mesh preset on its topology, at the seeds' RL shapes.

    python benchmarks/plan_presets.py --out runs/plan [--jobs 1] [--nice 0] [--only qwen3-32b] [--shapes g8_4k,g16_8k]
    python benchmarks/plan_presets.py --out runs/plan --runs qwen2.5-0.5b:g8_4k,qwen3-32b:g16_8k

Runs `python -m maxnorm_jax.plan --json` (bf16 parameters and compute, prompts of up to 1,024
tokens, completions of 4,096 or 8,192, groups of 8 or 16, the config's 64 prompts a step) for each
(preset, shape) in a subprocess, `--jobs` at a time at `--nice`, into OUT/<preset>_<shape>.json (a
run whose file exists is skipped; its stderr goes to .log, its CPU seconds, wall seconds and max
RSS to .time), then prints the markdown table. The grid runs every preset at g8_4k and g16_8k (the
easiest and the hardest shape) before the other shapes, largest and smallest presets alternating.
Deep models are planned from compiles with 2 and 4 layers (`--layers`,
`maxnorm_jax.plan.extrapolate`); `--full NAME` compiles NAME at its real depth as well (shape g8_4k),
to check the extrapolation."""

import argparse
import concurrent.futures as cf
import importlib.util
import json
import os
import subprocess
import sys
import time

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


def approx_params(arch: dict) -> float:
  """Parameter count from a published config (for ordering the grid only)."""
  h, layers, d = arch["hidden_size"], arch["num_hidden_layers"], arch["head_dim"]
  attn = h * d * (2 * arch["num_attention_heads"] + 2 * arch["num_key_value_heads"])
  mlp = 3 * h * arch.get("moe_intermediate_size", arch["intermediate_size"]) * arch.get("num_experts", 1)
  return layers * (attn + mlp) + arch["vocab_size"] * h * (1 if arch["tie_word_embeddings"] else 2)


def interleaved(names: list[str], models: dict) -> list[str]:
  """Largest, smallest, second largest, second smallest, ...: informative cells early on both ends."""
  by_size = sorted(names, key=lambda n: -approx_params(models[n]["arch"]))
  return [by_size[i // 2] if i % 2 == 0 else by_size[-1 - i // 2] for i in range(len(by_size))]


def grid(names: list[str], models: dict, shapes: list[str]) -> list[tuple[str, str]]:
  """(preset, shape) cells: every preset at g8_4k and g16_8k (easiest, hardest) first, then the rest."""
  first = [s for s in ("g8_4k", "g16_8k") if s in shapes]
  rest = [s for s in shapes if s not in first]
  order = interleaved(names, models)
  return [(p, s) for batch in (first, rest) for p in order for s in batch]


def command(preset: str, shape: str, extra: dict, layers: str) -> list[str]:
  g, n = SHAPES[shape]
  values = dict(BASE, **{"rollout.group_size": g, "rollout.max_new_tokens": n}, **extra)
  cmd = [sys.executable, "-m", "maxnorm_jax.plan", f"--config=configs/default.py:model={preset},task=math500", "--json"]
  cmd += [f"--config.{k}={v}" for k, v in values.items()]
  return cmd + ([f"--layers={layers}"] if layers else [])


def run(cmd: list[str], path: str, nice: int = 0) -> str:
  """Runs one plan into `path`; its CPU seconds, wall seconds and max RSS go to `path`.time."""
  if os.path.exists(path):
    return f"{path} (kept)"
  env = dict(os.environ, PYTHONPATH=ROOT, JAX_PLATFORMS="cpu", MAXNORM_PLAN_VERBOSE="1")  # pieces logged to .log
  t0 = time.time()
  with open(path + ".part", "w") as out, open(path + ".log", "w") as err:
    proc = subprocess.Popen(["nice", "-n", str(nice), *cmd], cwd=ROOT, env=env, stdout=out, stderr=err)
    _, status, usage = os.wait4(proc.pid, 0)  # this child's own rusage, also with --jobs > 1
  code = os.waitstatus_to_exitcode(status)
  cost = {
    "exit": code,
    "cpu_s": round(usage.ru_utime + usage.ru_stime, 1),
    "wall_s": round(time.time() - t0, 1),
    "max_rss_gib": round(usage.ru_maxrss / 1024**2, 2),
    "loadavg": os.getloadavg(),
  }
  with open(path + ".time", "w") as f:
    json.dump(cost, f)
  with open(path + ".cmd", "w") as f:
    f.write(" ".join(cmd[1:]) + "\n")
  if code not in (0, 1):
    os.replace(path + ".log", path + ".err")
    return f"{path}: exit {code} {cost}"
  os.replace(path + ".part", path)
  return f"{path}: exit {code} {cost}"


def table(out: str) -> str:
  """The markdown table of every OUT/*.json (KV GiB/chip: one sampler pass's cache)."""
  rows = [
    "| preset | topology (chips) | mesh | shape | fits | peak GiB/chip (piece) | params+opt GiB/chip | KV GiB/chip "
    "| sampler passes | est. step s | MFU | depth | plan CPU s (wall s) |",
    "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
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
    cost = "-"
    if os.path.exists(os.path.join(out, name + ".time")):
      with open(os.path.join(out, name + ".time")) as f:
        t = json.load(f)
      cost = f"{t['cpu_s']:.0f} ({t['wall_s']:.0f})"
    rows.append(
      f"| {s['model']} | {s['topology']} ({s['chips']}) | {mesh} | {sh['prompts']}x{sh['group_size']}, "
      f"{sh['prompt_len']}+{sh['new_tokens']} | {'yes' if s['fits'] else '**no**'} | "
      f"{s['peak_bytes_per_chip'] / gib:.1f} ({s['peak_piece']}) | "
      f"{(s['param_bytes_per_chip'] + s['opt_state_bytes_per_chip']) / gib:.1f} | "
      f"{s['kv_cache_bytes_per_chip'] / gib:.1f} | {sh.get('sample_chunks', 1)} | {s['est_step_s']:.1f} | "
      f"{s['mfu']:.0%} | {depth} | {cost} |"
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
  ap.add_argument("--layers", default="2,4", help="the depths the plan is extrapolated from")
  ap.add_argument("--nice", type=int, default=0, help="nice level of the planner processes")
  ap.add_argument("--table", action="store_true", help="only print the table of OUT")
  a = ap.parse_args()
  os.makedirs(a.out, exist_ok=True)
  if not a.table:
    extra = dict(kv.split("=", 1) for kv in a.set)
    models = presets()
    names = [p for p in models if not a.only or p in a.only.split(",")]
    if a.runs:
      cells = [tuple(r.split(":")) for r in a.runs.split(",")]
    else:
      cells = grid(names, models, a.shapes.split(","))
    jobs = [(command(p, s, extra, a.layers), os.path.join(a.out, f"{p}_{s}.json")) for p, s in cells]
    for p in filter(None, a.full.split(",")):
      jobs.append((command(p, "g8_4k", extra, ""), os.path.join(a.out, f"{p}_g8_4k_full.json")))
    with cf.ThreadPoolExecutor(a.jobs) as pool:
      for line in pool.map(lambda j: run(*j, nice=a.nice), jobs):
        print(line, flush=True)
  print(table(a.out))


if __name__ == "__main__":
  main()
