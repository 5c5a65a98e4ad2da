"""Verifier throughput: math items/s through the pool vs math-verify in one process; code runs/s
through the sandbox and the sandbox's cost over a bare subprocess.

  .venv/bin/python benchmarks/verifiers.py [--items 240] [--code-runs 40] [--write]

Math: a fixed mix of answer formats (integers, fractions, decimals, radicals, polynomials,
sets, wrong answers) scored (1) by math-verify's parse + verify called in this process (its own
SIGALRM timeouts on, main thread), (2) by `VerifierPool` with 1 and 2 workers (hard deadlines,
built-in "math" records; workers started and warmed before timing). Code: `CodeVerifier` on a
one-case stdin/stdout program, against the same program run by a bare `python -I` subprocess
(same interpreter, no sandbox). With --write the table goes into BENCHMARKS.md under
"## Verifiers".
"""

import argparse
import logging
import os
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from maxnorm_jax.rewards import CodeVerifier, VerifierPool  # noqa: E402

try:
  from benchmarks import report
except ImportError:  # run as a script from benchmarks/
  import report

MATH_TEMPLATES = [
  (r"The answer is $\boxed{{\frac{{{i}}}{{{j}}}}}$.", r"{i}/{j}"),
  (r"so \boxed{{{i}.5}}", r"\frac{{{k}}}{{2}}"),
  (r"\boxed{{{i}}}", "{i}"),
  (r"\boxed{{x^2+{t}x+{i2}}}", "(x+{i})^2"),
  (r"\boxed{{\sqrt{{{i2x2}}}}}", r"{i}\sqrt{{2}}"),
  (r"\boxed{{\{{{i}, {j}\}}}}", r"\{{{j},{i}\}}"),
  (r"\boxed{{-\frac{{{i}}}{{4}}}}", "-{q}"),
  (r"\boxed{{{j}}}", "{i}"),
  (r"\boxed{{\frac{{1}}{{{i}}}}}", "1/{j}"),
  (r"Therefore $x = \boxed{{{i}}}$", "{i}"),
  (r"\boxed{{2^{{{i}}}}}", "{p}"),
  (r"\boxed{{\frac{{{i}\pi}}{{2}}}}", r"{i}\pi/2"),
]


def math_items(n, offset=0):
  """n distinct (completion, gold) pairs in the formats of MATH_TEMPLATES (no cache hits)."""
  out = []
  for m in range(offset, offset + n):
    i = 3 + m // len(MATH_TEMPLATES)
    c, g = MATH_TEMPLATES[m % len(MATH_TEMPLATES)]
    v = dict(i=i, j=i + 1, k=2 * i + 1, t=2 * i, i2=i * i, i2x2=2 * i * i, q=i / 4, p=2**i)
    out.append((c.format(**v), g.format(**v)))
  return out


def bench_math_inline(items, repeats):
  """Best items/s of math-verify's parse + verify over `items`, called in this process."""
  from math_verify import parse, verify

  for completion, gold in math_items(len(MATH_TEMPLATES) * 2, len(items)):  # first-call costs
    verify(parse(f"$\\boxed{{{gold}}}$"), parse(completion))
  best = 0.0
  for r in range(repeats):
    batch = math_items(len(items), (r + 2) * len(items))  # fresh items: no parse-cache hits
    t0 = time.perf_counter()
    for completion, gold in batch:
      verify(parse(f"$\\boxed{{{gold}}}$"), parse(completion))
    best = max(best, len(batch) / (time.perf_counter() - t0))
  return best


def bench_math_pool(items, workers, repeats):
  """Best items/s of `VerifierPool(workers)` on built-in "math" records (fresh items per repeat)."""
  with VerifierPool(num_workers=workers) as pool:
    assert pool.wait_ready(300)
    warm = [(c, {"task": "math", "answer": g}) for c, g in math_items(len(MATH_TEMPLATES) * 2 * workers, len(items))]
    pool.score(warm, timeout=300)  # first-call costs of every worker
    best, correct = 0.0, None
    for r in range(repeats):
      batch = items if r == 0 else math_items(len(items), (r + 2) * len(items))
      records = [(c, {"task": "math", "answer": g}) for c, g in batch]
      t0 = time.perf_counter()
      scores = pool.score(records, timeout=600)
      best = max(best, len(items) / (time.perf_counter() - t0))
      if r == 0:
        correct = sum(s.reward for s in scores)
  return best, correct


def bench_dispatch(n=2000):
  """Items/s of trivial "arith" records through a 1-worker pool: the pool's own per-item cost."""
  records = [(str(i), {"task": "arith", "answer": str(i)}) for i in range(n)]
  with VerifierPool(num_workers=1) as pool:
    assert pool.wait_ready(300)
    pool.score(records[:100], timeout=300)
    t0 = time.perf_counter()
    pool.score(records, timeout=300)
    return n / (time.perf_counter() - t0)


CODE = "a, b = map(int, input().split())\nprint(a + b)\n"


def bench_code(runs):
  verifier = CodeVerifier(timeout_s=10)
  completion = f"```python\n{CODE}```"
  tests = [{"input": "2 3", "output": "5"}]
  assert verifier.score(completion, tests).reward == 1.0  # finds the interpreter
  t0 = time.perf_counter()
  for _ in range(runs):
    assert verifier.score(completion, tests).reward == 1.0
  sandbox_s = (time.perf_counter() - t0) / runs
  python = verifier.sandbox.python
  with tempfile.TemporaryDirectory() as d:
    path = os.path.join(d, "main.py")
    with open(path, "w") as f:
      f.write(CODE)
    t0 = time.perf_counter()
    for _ in range(runs):
      out = subprocess.run([python, "-I", path], input=b"2 3", capture_output=True, cwd=d)
      assert out.stdout.strip() == b"5"
    bare_s = (time.perf_counter() - t0) / runs
  return sandbox_s, bare_s, verifier.sandbox.mode, python


def main():
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("--items", type=int, default=240)
  parser.add_argument("--code-runs", type=int, default=40)
  parser.add_argument("--repeats", type=int, default=3)
  parser.add_argument("--write", action="store_true")
  args = parser.parse_args()
  logging.getLogger("math_verify").setLevel(logging.ERROR)

  items = math_items(args.items)
  load0 = os.getloadavg()[0]
  inline = bench_math_inline(items, args.repeats)
  pool1, correct1 = bench_math_pool(items, 1, args.repeats)
  pool2, correct2 = bench_math_pool(items, 2, args.repeats)
  assert correct1 == correct2, (correct1, correct2)
  dispatch = bench_dispatch()
  sandbox_s, bare_s, mode, python = bench_code(args.code_runs)
  load1 = os.getloadavg()[0]

  rows = [
    "| measurement | value |",
    "|---|---|",
    f"| math-verify parse+verify in one process | {inline:.0f} items/s |",
    f"| VerifierPool, 1 worker (hard deadline per item) | {pool1:.0f} items/s |",
    f"| VerifierPool, 2 workers | {pool2:.0f} items/s |",
    f"| VerifierPool dispatch, trivial arith items, 1 worker | {dispatch:.0f} items/s |",
    f"| code runs through the sandbox (mode {mode}) | {1 / sandbox_s:.1f} runs/s ({sandbox_s * 1e3:.1f} ms/run) |",
    f"| same program, bare subprocess | {1 / bare_s:.1f} runs/s ({bare_s * 1e3:.1f} ms/run) |",
    f"| sandbox cost over a bare subprocess | {(sandbox_s - bare_s) * 1e3:.1f} ms/run |",
  ]
  notes = (
    f"Best of {args.repeats} passes over {args.items} fresh math items ({len(MATH_TEMPLATES)} formats, all distinct, {int(correct1)} correct), "
    f"{args.code_runs} code runs of a one-case stdin/stdout program; interpreter {python}. "
    f"1-minute load average {load0:.1f} -> {load1:.1f} on a machine shared with other jobs, so "
    "treat the figures as lower bounds (the 1- vs 2-worker ratio in particular). The pool's cost over one process is one pipe round "
    "trip per item plus result validation; its gain is concurrency with the device and "
    "deadlines that hold."
  )
  body = report.header("python benchmarks/verifiers.py --write") + "\n" + "\n".join(rows) + "\n\n" + notes + "\n"
  print(body)
  if args.write:
    report.update_section("Verifiers", body)


if __name__ == "__main__":
  main()
