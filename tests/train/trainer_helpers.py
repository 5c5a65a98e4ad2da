"""Shared helpers of the trainer tests: the config file, runlocal configs, metric rows, subprocess runs."""

import importlib.util
import json
import os
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CONFIG_PATH = os.path.join(ROOT, "configs", "default.py")

# Every value a step must log (issue 5), besides the timings.
STEP_METRICS = (
  "acr",
  "zero_group_frac",
  "subres_frac",
  "small_gap_frac",
  "lowvar_groups",
  "lowvar_kl_mean",
  "lowvar_kl_p95",
  "lowvar_inv_scale_p95",
  "lowvar_inv_scale_p99",
  "reward_mean",
  "inv_scale_p95",
  "inv_scale_p99",
  "kl_mean",
  "kl_p95",
  "clip_frac",
  "entropy",
  "response_len_mean",
  "grad_norm",
  "time/generate",
  "time/verify",
  "time/logprobs",
  "time/update",
)


def config_module():
  spec = importlib.util.spec_from_file_location("maxnorm_default_config", CONFIG_PATH)
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  return module


def runlocal_config(method="maxnorm_rloo", **sections):
  """The runlocal config of a method row; `sections` = {"train": {"steps": 4}, ...} overrides."""
  c = config_module().get_config(f"method={method},runlocal=True")
  for section, values in sections.items():
    for k, v in values.items():
      c[section][k] = v
  return c


def read_rows(workdir):
  with open(os.path.join(workdir, "metrics.jsonl")) as f:
    return [json.loads(line) for line in f if line.strip()]


def comparable(row):
  """A metric row without wall-clock values."""
  return {k: v for k, v in row.items() if k != "time" and not k.startswith("time/")}


def main_command(workdir, *args, config_arg="runlocal=True"):
  return [
    sys.executable,
    "-m",
    "maxnorm_jax.main",
    f"--config={CONFIG_PATH}:{config_arg}",
    f"--workdir={workdir}",
    *args,
  ]


# Trainer subprocesses share compiled programs through JAX's persistent cache (keyed by program and
# backend, so a stale entry is never reused), which keeps the resume and pod tests short.
JIT_CACHE = os.path.join(tempfile.gettempdir(), f"maxnorm_jax_test_jit_cache_{os.getuid()}")


def child_env(devices=8):
  env = dict(os.environ)
  env["JAX_COMPILATION_CACHE_DIR"] = JIT_CACHE
  env["JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS"] = "0"
  env["XLA_FLAGS"] = f"--xla_force_host_platform_device_count={devices}"
  env["JAX_PLATFORMS"] = "cpu"
  env["PYTHONUNBUFFERED"] = "1"
  return env


def run_main(workdir, *args, devices=8, timeout=300, config_arg="runlocal=True"):
  return subprocess.run(
    main_command(workdir, *args, config_arg=config_arg),
    cwd=ROOT,
    env=child_env(devices),
    capture_output=True,
    text=True,
    timeout=timeout,
  )
