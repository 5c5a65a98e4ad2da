"""CLI: the per-chip plan of one RL step on a TPU slice, compiled ahead of time on this machine.

  python -m maxnorm_jax.plan --config=configs/default.py:model=qwen3-32b,task=math500 --topology=v5p-128 \
      [--config.rollout.max_new_tokens=8192 ...] [--json]

--topology: v5p-128 / v4-32 (TensorCores, 2 per chip), v5e-16 / v6e-8 (chips), v5p:4x4x4 / v5e:4x4
(chip grid), or cpu (this machine's devices; --cpu_devices simulated ones). Default: the model
preset's `config.model.topology`. Exit status 1 when a piece does not fit (named on stderr with its
largest buffers), 2 for a bad flag or config value.
"""

import json
import os
import sys

from absl import app, flags
from ml_collections import config_flags

DEFAULT_CONFIG = os.path.join(
  os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "configs", "default.py"
)

FLAGS = flags.FLAGS
flags.DEFINE_string("topology", "", "TPU slice (v5p-128, v5e:4x4, ...) or cpu; default: config.model.topology.")
flags.DEFINE_bool("json", False, "Print one JSON object instead of the table.")
flags.DEFINE_integer("cpu_devices", 8, "Simulated CPU devices for --topology=cpu.")
flags.DEFINE_string(
  "layers", "", "a,b: compile the step with a and b decoder layers and extrapolate linearly to the model's depth."
)
config_flags.DEFINE_config_file("config", DEFAULT_CONFIG, "A config file with get_config(arg).", lock_config=True)


def _devices_and_chip(topology: str, compute_dtype: str):
  if topology == "cpu":
    flag = f"--xla_force_host_platform_device_count={FLAGS.cpu_devices}"
    if "xla_force_host_platform_device_count" not in os.environ.get("XLA_FLAGS", ""):
      os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") + " " + flag).strip()
    import jax

    from maxnorm_jax.models.config import dtype_of
    from maxnorm_jax.plan.cpu_chip import measure_cpu_chip

    devices = jax.devices("cpu")
    return devices, measure_cpu_chip(dtype_of(compute_dtype), len(devices))
  from maxnorm_jax.plan.topology import parse_topology, tpu_devices

  topo = parse_topology(topology)
  return tpu_devices(topo), topo.chip


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f"unexpected arguments: {argv[1:]}")
  os.environ.setdefault("JAX_PLATFORMS", "cpu")  # libtpu only describes the slice; nothing runs on it
  c = FLAGS.config
  from maxnorm_jax.train.config_check import ConfigError, validate

  topology = FLAGS.topology or c.model.get("topology", "")
  try:
    validate(c)
    if not topology:
      raise ValueError("--topology is required (the config's model.topology is empty)")
    devices, chip = _devices_and_chip(topology, c.model.dtype)
    from maxnorm_jax.plan.pieces import compile_step, model_config_of

    depths = [int(x) for x in FLAGS.layers.split(",")] if FLAGS.layers else []
    if depths and len(depths) != 2:
      raise ValueError(f"--layers={FLAGS.layers!r}: give two layer counts, e.g. --layers=2,4")
    if depths:
      from maxnorm_jax.plan import extrapolate as ex

      target = model_config_of(c)[0].num_layers
      plans = [compile_step(ex.with_layers(c, n), devices) for n in depths]
    else:
      plans = [compile_step(c, devices)]
  except (ConfigError, ValueError, RuntimeError) as e:
    print(f"plan: {e}", file=sys.stderr)
    sys.exit(2)
  from maxnorm_jax.plan.report import failures, summarize, text

  summaries = [summarize(p, chip, topology, c) for p in plans]
  summary = ex.extrapolate(*summaries, *depths, target) if depths else summaries[0]
  plan = plans[-1]
  print(json.dumps(summary, indent=1) if FLAGS.json else text(summary))
  problems = failures(plan, summary)
  for p in problems:
    print(f"plan: {p}", file=sys.stderr)
  sys.exit(1 if problems else 0)


if __name__ == "__main__":
  app.run(main)
