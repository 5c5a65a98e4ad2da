"""What the peer generation runners share: their flags, the seeded prompts and the JSON they print.
Imported by the runners in .venv-bench (numpy only)."""

import argparse
import os
import sys
import time

import numpy as np

FIRST_ID = 4  # the char tokenizer's specials (pad, bos, eos, unk) are ids 0..3; prompts use the rest


def generation_args(doc: str) -> argparse.Namespace:
  parser = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
  parser.add_argument("--model", required=True, help="Hugging Face checkpoint directory")
  parser.add_argument("--rows", type=int, default=512, help="sequences generated at once")
  parser.add_argument("--prompt-len", type=int, default=6)
  parser.add_argument("--new-tokens", type=int, default=64)
  parser.add_argument("--temperature", type=float, default=1.0)
  parser.add_argument("--eos", choices=("on", "off"), default="off", help="off: every row makes --new-tokens")
  parser.add_argument("--repeats", type=int, default=3, help="timed runs after one warm-up run")
  parser.add_argument("--threads", type=int, default=2)
  parser.add_argument("--seed", type=int, default=0)
  parser.add_argument("--dtype", choices=("float32", "bfloat16"), default="float32", help="weights and activations")
  return parser.parse_args()


def json_stdout():
  """A file on the real stdout for the one JSON line. File descriptor 1 then goes to stderr, so whatever
  else is printed there, by this process or by the subprocesses it starts (vLLM's engine), is a log."""
  sys.stdout.flush()
  out = os.fdopen(os.dup(1), "w")
  os.dup2(2, 1)
  return out


def prompt_ids(rows: int, prompt_len: int, vocab_size: int, seed: int) -> np.ndarray:
  """Seeded random prompt token ids [rows, prompt_len] (no special ids)."""
  return np.random.default_rng(seed).integers(FIRST_ID, vocab_size, size=(rows, prompt_len), dtype=np.int64)


def timed(fn):
  """(fn's result, wall seconds)."""
  start = time.perf_counter()
  out = fn()
  return out, time.perf_counter() - start


def result(args, lengths: np.ndarray, times: list[float], **extra) -> dict:
  """The runner's JSON: tokens of the last run, best and all times, tokens/s at the best, length stats."""
  tokens = int(lengths.sum())
  best = min(times)
  return {
    "rows": args.rows,
    "prompt_len": args.prompt_len,
    "new_tokens": args.new_tokens,
    "temperature": args.temperature,
    "eos": args.eos,
    "tokens": tokens,
    "best_s": best,
    "times_s": times,
    "tokens_per_s": tokens / best,
    "length": {
      "mean": float(lengths.mean()),
      "p50": float(np.percentile(lengths, 50)),
      "p90": float(np.percentile(lengths, 90)),
      "p99": float(np.percentile(lengths, 99)),
      "max": int(lengths.max()),
    },
    "threads": args.threads,
    "dtype": args.dtype,
    **extra,
  }
