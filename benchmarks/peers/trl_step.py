"""TRL's GRPOTrainer on CPU on the peer checkpoint, timed per RL step; prints one JSON object.

  .venv-bench/bin/python benchmarks/peers/trl_step.py --model runs/bench_ckpt [--steps 5]

One RL step here is what one step of maxnorm_jax's trainer does with data.batch_size=--prompts,
rollout.group_size=--group and train.minibatches=--minibatches: one generation of prompts x group rows
(--new-tokens each: EOS is suppressed by min_new_tokens, so the work is fixed), the old-policy and
(beta > 0) reference log-prob passes over them, then --minibatches optimizer steps on minibatches of
rows / minibatches rows, each gathered over --grad-accum microbatches (ours: train.grad_accum). In
TRL's terms: per_device_train_batch_size = rows / (minibatches x grad_accum), gradient_accumulation_steps
= grad_accum, steps_per_generation = minibatches x grad_accum (so TRL computes the old log-probs, as
the policy moves between the optimizer steps of one generation, and scores the rows in passes of one
microbatch), num_iterations = 1. AdamW
(b1 0.9, b2 0.99, eps 1e-8, no weight decay), lr 5e-4, global grad-norm clip 1.0, clip 0.2 and
float32 as in configs/default.py (--bf16: torch's bfloat16 autocast over the float32 weights, as
model.dtype=bfloat16 does in ours); gradient checkpointing off (TRL's default is on; ours has no remat).
The reward is a trivial function of the text. Each RL step's time is taken at the trainer's
on_step_end of its last optimizer step; the first RL step (warm-up) is left out of the median.
"""

import argparse
import json
import sys
import time

import numpy as np
import torch
import transformers
import trl
from common import json_stdout
from datasets import Dataset

ALPHABET = "0123456789abcdefghijklmnopqrstuvwxyz"


class StepTimes(transformers.TrainerCallback):
  """Wall time at the start of training and at the end of every optimizer step."""

  def __init__(self):
    self.marks = []

  def on_train_begin(self, args, state, control, **kwargs):
    self.marks = [time.perf_counter()]

  def on_step_end(self, args, state, control, **kwargs):
    self.marks.append(time.perf_counter())


def reward_ones(completions, **kwargs):
  """Counts the 1s of each completion: cheap, and varied enough to give non-zero advantages."""
  return [float(c.count("1")) for c in completions]


def main():
  parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
  parser.add_argument("--model", required=True, help="Hugging Face checkpoint directory")
  parser.add_argument("--prompts", type=int, default=64, help="prompts per RL step")
  parser.add_argument("--group", type=int, default=8, help="samples per prompt")
  parser.add_argument("--prompt-len", type=int, default=6, help="prompt characters (= tokens of the char tokenizer)")
  parser.add_argument("--new-tokens", type=int, default=64)
  parser.add_argument("--beta", type=float, default=0.01)
  parser.add_argument("--minibatches", type=int, default=4, help="optimizer steps per generation")
  parser.add_argument(
    "--grad-accum", type=int, default=1, help="microbatches per optimizer step (ours: train.grad_accum)"
  )
  parser.add_argument("--steps", type=int, default=5, help="RL steps (the first is a warm-up)")
  parser.add_argument("--threads", type=int, default=2)
  parser.add_argument("--bf16", action="store_true", help="bfloat16 autocast over the float32 weights")
  parser.add_argument("--seed", type=int, default=0)
  parser.add_argument("--output-dir", default="/tmp/trl_step")
  args = parser.parse_args()
  out_json = json_stdout()  # the trainer prints its logs on stdout
  rows = args.prompts * args.group
  micro = args.minibatches * args.grad_accum
  if rows % micro:
    raise SystemExit(f"--minibatches {args.minibatches} x --grad-accum {args.grad_accum} does not divide {rows} rows")
  torch.set_num_threads(args.threads)
  rng = np.random.default_rng(args.seed)
  texts = ["".join(rng.choice(list(ALPHABET), args.prompt_len)) for _ in range(args.prompts * args.steps)]
  config = trl.GRPOConfig(
    output_dir=args.output_dir,
    use_cpu=True,
    bf16=args.bf16,
    fp16=False,
    gradient_checkpointing=False,
    seed=args.seed,
    max_steps=args.steps * args.minibatches,
    per_device_train_batch_size=rows // micro,
    gradient_accumulation_steps=args.grad_accum,
    steps_per_generation=micro,
    num_iterations=1,
    num_generations=args.group,
    max_completion_length=args.new_tokens,
    temperature=1.0,
    top_p=1.0,
    top_k=0,
    generation_kwargs={"min_new_tokens": args.new_tokens},
    beta=args.beta,
    epsilon=0.2,
    learning_rate=5e-4,
    lr_scheduler_type="constant",
    adam_beta1=0.9,
    adam_beta2=0.99,
    adam_epsilon=1e-8,
    weight_decay=0.0,
    max_grad_norm=1.0,
    model_init_kwargs={"dtype": torch.float32},
    logging_steps=1,
    save_strategy="no",
    report_to="none",
    disable_tqdm=True,
    dataloader_num_workers=0,
  )
  timer = StepTimes()
  trainer = trl.GRPOTrainer(
    model=args.model,
    reward_funcs=reward_ones,
    args=config,
    train_dataset=Dataset.from_dict({"prompt": texts}),
    callbacks=[timer],
  )
  trainer.train()
  ends = timer.marks[:: args.minibatches]
  steps = [b - a for a, b in zip(ends, ends[1:])]
  for i, s in enumerate(steps):
    print(f"RL step {i}{' (warm-up)' if i == 0 else ''}: {s:.2f} s", file=sys.stderr)
  print(
    json.dumps(
      {
        "peer": "trl",
        "step_s": steps,
        "median_s": float(np.median(steps[1:] if len(steps) > 1 else steps)),
        "skipped": 1 if len(steps) > 1 else 0,
        "step_covers": {
          "rows_generated": rows,
          "prompt_len": args.prompt_len,
          "new_tokens": args.new_tokens,
          "optimizer_steps": args.minibatches,
          "rows_per_optimizer_step": rows // args.minibatches,
          "rows_per_microbatch": rows // micro,
        },
        "beta": args.beta,
        "bf16": args.bf16,
        "threads": args.threads,
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "version": trl.__version__,
      }
    ),
    file=out_json,
    flush=True,
  )


if __name__ == "__main__":
  main()
