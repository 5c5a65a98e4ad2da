"""The host-side cost of the evaluation metrics (mean@n, pass@k, maj@k, greedy accuracy, each with
a bootstrap std over prompts) that every evaluation adds on top of sampling and verifying.

  .venv/bin/python benchmarks/eval_metrics.py [--write]

Shapes: the main job's evaluation (256 prompts x 4 samples, pass_k (1, 2, 4) after the k <= n cut,
1000 bootstrap resamples) and a seed-sized one (500 prompts x 16 samples, k in 1..16). Best of 5
calls of `maxnorm_jax.evaluation.set_metrics`. With --write the table goes into BENCHMARKS.md
under "## Evaluation metrics".
"""

import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import numpy as np

from maxnorm_jax.evaluation import set_metrics

try:
  from benchmarks import report
except ImportError:  # run as a script from benchmarks/
  import report

PASS_K = (1, 2, 4, 8, 16, 32, 64)
SHAPES = ((256, 4), (500, 16))


def _inputs(p: int, n: int, seed: int = 0):
  rng = np.random.default_rng(seed)
  answers_int = rng.integers(0, 5, size=(p, n))
  correct = answers_int == 0
  rewards = np.where(correct, 1.0, rng.integers(0, 4, size=(p, n)) / 4).astype(np.float64)
  answers = [[str(a) for a in row] for row in answers_int]
  return rewards, correct, rng.random(p) < 0.4, answers


def main():
  parser = argparse.ArgumentParser()
  parser.add_argument("--write", action="store_true", help="write the table into BENCHMARKS.md")
  args = parser.parse_args()
  rows = []
  for p, n in SHAPES:
    rewards, correct, greedy, answers = _inputs(p, n)

    def run(rewards=rewards, correct=correct, greedy=greedy, answers=answers):
      return set_metrics("eval/x", rewards, correct, greedy, pass_k=PASS_K, answers=answers, num_resamples=1000)

    metrics = len(run()) // 3
    t = report.best_time(run, repeats=5)
    rows.append(f"| {p} x {n} | {metrics} | {t * 1e3:.1f} ms |")
  table = "| prompts x samples | metrics (each with _n, _std) | set_metrics |\n|---|---|---|\n" + "\n".join(rows)
  print(table)
  if args.write:
    note = (
      "Host-side summary of one evaluation set (1000 bootstrap resamples per metric, pass_k (1, 2, 4, 8, 16, "
      "32, 64) cut at n, maj@k on string answers). Sampling and verification, which the metrics reuse "
      "(no extra samples), are not included. Load average: "
      f"{os.getloadavg()[0]:.1f} (a shared machine).\n\n"
    )
    report.update_section(
      "Evaluation metrics", report.header(".venv/bin/python benchmarks/eval_metrics.py --write") + "\n" + note + table
    )


if __name__ == "__main__":
  main()
