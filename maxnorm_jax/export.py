"""CLI: export a step of a run as a Hugging Face directory that `transformers` loads.

  python -m maxnorm_jax.export --workdir=DIR [--step=N] --out=PATH [--dtype=bfloat16]

PATH gets the policy's weights (model.safetensors, sharded with an index past 2 GiB), config.json
(Qwen2 / Qwen3 / Qwen3-MoE, with the tokenizer's bos/eos/pad ids), the tokenizer files and
generation_config.json of the run's tokenizer directory (chat template included when it had one),
and maxnorm_jax_export.json (run, step, prompt format, system prompt). A run of the built-in tiny
model (a Qwen3-shaped decoder) with the character tokenizer exports as a Qwen3ForCausalLM plus a
tokenizer.json giving the same ids; it has no chat template, and its prompts were plain text
("12+7=", no special tokens), as maxnorm_jax_export.json says. Single-process runs only.
"""

from __future__ import annotations

import json
import os
import shutil

from absl import app, flags
from absl import logging as absl_logging

FLAGS = flags.FLAGS
if "workdir" not in FLAGS:
  flags.DEFINE_string("workdir", None, "Run directory (config.json, checkpoints/).")
if "step" not in FLAGS:  # maxnorm_jax.evaluate's CLI defines it too
  flags.DEFINE_integer("step", None, "Checkpoint step (default: the latest).")
flags.DEFINE_string("out", None, "Output directory of the Hugging Face checkpoint.")
flags.DEFINE_string("dtype", None, "Stored dtype (default: the run's model.param_dtype).")

#: Files of a Hugging Face tokenizer directory copied into the export when present.
TOKENIZER_FILES = (
  "tokenizer.json",
  "tokenizer_config.json",
  "special_tokens_map.json",
  "added_tokens.json",
  "vocab.json",
  "merges.txt",
  "chat_template.jinja",
  "chat_template.json",
  "generation_config.json",
)


def copy_tokenizer_files(src: str, out: str) -> list[str]:
  """Copies the `TOKENIZER_FILES` that the tokenizer directory `src` has into `out` -> their names."""
  copied = []
  for name in TOKENIZER_FILES:
    if os.path.exists(os.path.join(src, name)):
      shutil.copyfile(os.path.join(src, name), os.path.join(out, name))
      copied.append(name)
  return copied


def _tokenizer_files(trainer, out: str) -> list[str]:
  from maxnorm_jax.data import CharTokenizer
  from maxnorm_jax.models.char_export import save_char_tokenizer
  from maxnorm_jax.train.loop import resolve_path

  if isinstance(trainer.tokenizer, CharTokenizer):
    return save_char_tokenizer(trainer.tokenizer, out)
  return copy_tokenizer_files(resolve_path(trainer.config.data.tokenizer, "data.tokenizer"), out)


def _add_token_ids(out: str, tokenizer) -> None:
  path = os.path.join(out, "config.json")
  with open(path) as f:
    config = json.load(f)
  for key, value in (
    ("bos_token_id", getattr(tokenizer, "bos_id", None)),
    ("eos_token_id", tokenizer.eos_id),
    ("pad_token_id", tokenizer.pad_id),
  ):
    if value is not None:
      config[key] = int(value)
  with open(path, "w") as f:
    json.dump(config, f, indent=2)


def export(workdir: str, out: str, step: int | None = None, dtype: str | None = None) -> tuple[int, list[str]]:
  """Writes the Hugging Face directory `out` of checkpoint `step` (None: latest) -> (step, files)."""
  import jax

  from maxnorm_jax.models import hf
  from maxnorm_jax.run_restore import restored_trainer, run_config

  if jax.process_count() > 1:
    raise RuntimeError("maxnorm_jax.export runs in a single process (it gathers every weight on the host)")
  trainer, step = restored_trainer(run_config(workdir), workdir, step)
  try:
    hf.save_weights(trainer.model_cfg, trainer.state.params, out, dtype)
    _add_token_ids(out, trainer.tokenizer)
    c = trainer.config
    _tokenizer_files(trainer, out)
    meta = {
      "workdir": os.path.abspath(workdir),
      "step": step,
      "model": c.model.kind if c.model.kind == "tiny" else c.model.path,
      "tokenizer": c.data.tokenizer,
      "prompt_format": c.data.prompt_format,
      "system_prompt": c.data.system_prompt,
    }
    with open(os.path.join(out, "maxnorm_jax_export.json"), "w") as f:
      json.dump(meta, f, indent=2)
  finally:
    trainer.close()
  files = sorted(os.listdir(out))
  return step, files


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f"unexpected arguments: {argv[1:]}")
  if not FLAGS.workdir or not FLAGS.out:
    raise app.UsageError("--workdir and --out are required")
  absl_logging.set_verbosity(absl_logging.WARNING)
  step, files = export(FLAGS.workdir, FLAGS.out, FLAGS.step, FLAGS.dtype)
  print(f"step {step} of {FLAGS.workdir} -> {FLAGS.out}: {', '.join(files)}")


if __name__ == "__main__":
  app.run(main)
