"""CLI: evaluate a saved run or a Hugging Face model with the trainer's own evaluation.

  python -m maxnorm_jax.evaluate --workdir=DIR [--step=N]
  python -m maxnorm_jax.evaluate --workdir=OUT --model=PATH --config=configs/default.py:task=gsm8k,model=qwen2.5-0.5b

The first form restores checkpoint N of the run in DIR (default: the latest) with the run's own
config (DIR/config.json); the second evaluates the Hugging Face directory PATH (e.g. a base model
before RL) under --config, as step 0. Both run every evaluation set of the config (the held-out
split, data.eval_source, eval.sets) and write DIR/eval/step_<N>.jsonl (one row per prompt: set,
prompt, samples, rewards, correct, answers, the greedy completion and its reward) and
DIR/eval/step_<N>_summary.json (the metrics, named as the trainer logs them), and print the summary.
"""

from __future__ import annotations

import json
import os

from absl import app, flags
from absl import logging as absl_logging
from ml_collections import config_flags

FLAGS = flags.FLAGS
if "workdir" not in FLAGS:
  flags.DEFINE_string("workdir", None, "Run directory (with --model: where eval/ is written).")
if "step" not in FLAGS:  # maxnorm_jax.export's CLI defines it too
  flags.DEFINE_integer("step", None, "Checkpoint step (default: the latest).")
flags.DEFINE_string("model", None, "A Hugging Face checkpoint directory to evaluate instead of a run's checkpoint.")
if "config" not in FLAGS:  # maxnorm_jax.main's CLI defines it too
  config_flags.DEFINE_config_file("config", None, "With --model: the config (configs/default.py[:args]).")


def write_results(workdir: str, step: int, metrics: dict, details: list[dict], meta: dict) -> tuple[str, str]:
  """DIR/eval/step_<N>.jsonl and DIR/eval/step_<N>_summary.json -> their paths."""
  out = os.path.join(workdir, "eval")
  os.makedirs(out, exist_ok=True)
  rows_path = os.path.join(out, f"step_{step}.jsonl")
  with open(rows_path, "w") as f:
    f.writelines(json.dumps(r) + "\n" for r in details)
  summary_path = os.path.join(out, f"step_{step}_summary.json")
  with open(summary_path, "w") as f:
    json.dump({**meta, "step": step, "metrics": metrics}, f, indent=2)
  return rows_path, summary_path


def model_config(config, model_path: str):
  """`config` evaluating the Hugging Face directory `model_path` (its tokenizer unless "char")."""
  c = config.copy_and_resolve_references()
  c.model.kind = "hf"
  c.model.path = model_path
  if c.data.tokenizer != "char" and os.path.exists(os.path.join(model_path, "tokenizer.json")):
    c.data.tokenizer = model_path
  return c


def evaluate(workdir: str, step: int | None = None, model: str | None = None, config=None) -> tuple[int, dict]:
  """Runs the evaluation and writes its files -> (step, metrics)."""
  import jax

  from maxnorm_jax.run_restore import restored_trainer, run_config
  from maxnorm_jax.train import Trainer

  if model is not None:
    if config is None:
      raise app.UsageError("--model needs --config (the task, data and evaluation settings)")
    if step is not None:
      raise app.UsageError("--step applies to a run's checkpoints, not to --model")
    os.makedirs(workdir, exist_ok=True)
    trainer, step = Trainer(model_config(config, model), workdir), 0
    meta = {"model": os.path.abspath(model)}
  else:
    trainer, step = restored_trainer(run_config(workdir), workdir, step)
    meta = {"workdir": os.path.abspath(workdir)}
  try:
    metrics, details = trainer.evaluate(with_details=True)
  finally:
    trainer.close()
  if jax.process_index() == 0:
    rows_path, summary_path = write_results(workdir, step, metrics, details, meta)
    print(f"step {step}: {len(details)} prompts -> {rows_path}, {summary_path}")
    for k in sorted(metrics):
      if not k.endswith(("_n", "_std")):
        std = metrics.get(k + "_std")
        n = metrics.get(k + "_n")
        extra = f" +- {std:.4f} (n={int(n)})" if std is not None else ""
        print(f"  {k:40s} {metrics[k]:.4f}{extra}")
  return step, metrics


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f"unexpected arguments: {argv[1:]}")
  if not FLAGS.workdir:
    raise app.UsageError("--workdir is required")
  from maxnorm_jax.parallel.distributed import initialize_from_env

  initialize_from_env()
  absl_logging.set_verbosity(absl_logging.WARNING)
  evaluate(FLAGS.workdir, FLAGS.step, FLAGS.model, FLAGS.config if FLAGS.model else None)


if __name__ == "__main__":
  app.run(main)
