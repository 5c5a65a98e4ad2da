"""Built-in tasks generated from a seed, so the main job needs no download.

    make(name, split, seed, n) -> list of records (see `maxnorm_jax.data.records`)

Tasks (the verifiers in `maxnorm_jax.rewards.builtin` score them):

- "arith": "a+b=" or "a-b=" with 0 <= a, b <= 99; answer the integer result ("12+7=" -> "19").
  Binary reward.
- "arith_digits": the same problems; the reward is the fraction of the answer's k positions right
  (a 1/k grid: the "credible small gap" regime).
- "arith_noisy": the same problems; binary reward plus a deterministic jitter <= 1e-4, far below
  delta_res (the "sub-resolution" regime). Records carry `seed`, which seeds the jitter.
- "arith_mix": the same problems, each of one fixed kind (by a seed-independent hash of the problem,
  `mix_kind`): "noisy" (arith_noisy's reward, about 30%: sub-resolution jitter), "small" (0.018 when
  the units digit is right, else 0, about 30%: a credible gap >= delta_res inside a group std < 1e-2)
  and "digits" (arith_digits' reward, the rest: ordinary prompts). Records carry `kind` and `seed`.
- "code": short stdin/stdout programs (e.g. read two integers, print their sum) with 4 tests each.

Splits: every problem of a task belongs to exactly one split by a seed-independent hash of its
identity (about 10% "test"), so "train" and "test" are disjoint whatever the seeds. `make` draws
`n` problems of the split without replacement (with replacement once n exceeds the split's size:
arith has 18029 train / 1971 test problems, code 80 / 8), ordered by a generator seeded by `seed`.
"""

from __future__ import annotations

import hashlib
from typing import Any, Callable

import numpy as np

ARITH_TASKS = ("arith", "arith_digits", "arith_noisy", "arith_mix")
TASKS = ARITH_TASKS + ("code",)
SPLITS = ("train", "test")
TEST_FRACTION_PER_MILLE = 100
MAX_OPERAND = 99
CODE_TESTS_PER_PROBLEM = 4
# arith_mix: per mille of problems of each kind, in hash order (noisy, small, then digits).
MIX_KINDS = ("noisy", "small", "digits")
MIX_PER_MILLE = {"noisy": 300, "small": 300, "digits": 400}


def names() -> list[str]:
  """Names of the built-in tasks."""
  return list(TASKS)


def split_of(identity: str) -> str:
  """The split ("train" or "test") a problem belongs to, from a hash of its identity."""
  h = int.from_bytes(hashlib.sha256(identity.encode()).digest()[:8], "big")
  return "test" if h % 1000 < TEST_FRACTION_PER_MILLE else "train"


def mix_kind(prompt: str) -> str:
  """The arith_mix kind of the problem `prompt` ("12+7="): "noisy", "small" or "digits"."""
  h = int.from_bytes(hashlib.sha256(f"arith_mix:{prompt}".encode()).digest()[:8], "big") % 1000
  edge = 0
  for kind in MIX_KINDS:
    edge += MIX_PER_MILLE[kind]
    if h < edge:
      return kind
  raise AssertionError("MIX_PER_MILLE must sum to 1000")


def _arith_problems() -> list[tuple[int, str, int]]:
  return [(a, op, b) for a in range(MAX_OPERAND + 1) for op in "+-" for b in range(MAX_OPERAND + 1)]


def _arith_record(task: str, a: int, op: str, b: int, seed: int) -> dict[str, Any]:
  value = a + b if op == "+" else a - b
  record = {"prompt": f"{a}{op}{b}=", "answer": str(value), "tests": None, "task": task}
  if task in ("arith_noisy", "arith_mix"):
    record["seed"] = int(seed)
  if task == "arith_mix":
    record["kind"] = mix_kind(record["prompt"])
  return record


# ---- code: families of stdin/stdout problems; a family is (statement, input maker, solution) ----


def _ints(rng: np.random.Generator, k: int, lo: int = -50, hi: int = 50) -> list[int]:
  return [int(v) for v in rng.integers(lo, hi + 1, size=k)]


def _word(rng: np.random.Generator) -> str:
  letters = "abcdefghijklmnopqrstuvwxyz"
  return "".join(letters[i] for i in rng.integers(0, 26, size=int(rng.integers(1, 9))))


CodeFamily = tuple[str, Callable[[np.random.Generator], str], Callable[[str], str]]


def _code_families() -> dict[str, CodeFamily]:
  fam: dict[str, CodeFamily] = {}

  def two_ints(rng):
    return " ".join(map(str, _ints(rng, 2))) + "\n"

  def int_list(rng):
    xs = _ints(rng, int(rng.integers(1, 7)))
    return f"{len(xs)}\n" + " ".join(map(str, xs)) + "\n"

  fam["sum2"] = ("read two integers a and b on one line. print a+b.", two_ints, lambda s: str(sum(map(int, s.split()))))
  fam["diff2"] = (
    "read two integers a and b on one line. print a-b.",
    two_ints,
    lambda s: str(int(s.split()[0]) - int(s.split()[1])),
  )
  fam["prod2"] = (
    "read two integers a and b on one line. print a*b.",
    two_ints,
    lambda s: str(int(s.split()[0]) * int(s.split()[1])),
  )
  fam["max2"] = (
    "read two integers a and b on one line. print the larger one.",
    two_ints,
    lambda s: str(max(map(int, s.split()))),
  )
  fam["sumn"] = (
    "read n, then n integers on the next line. print their sum.",
    int_list,
    lambda s: str(sum(map(int, s.split()[1:]))),
  )
  fam["maxn"] = (
    "read n, then n integers on the next line. print the largest.",
    int_list,
    lambda s: str(max(map(int, s.split()[1:]))),
  )
  fam["rev"] = ("read a word. print it reversed.", lambda rng: _word(rng) + "\n", lambda s: s.strip()[::-1])
  fam["len"] = ("read a word. print its length.", lambda rng: _word(rng) + "\n", lambda s: str(len(s.strip())))
  for k in range(2, 10):
    for c in range(0, 10):
      fam[f"lin_{k}_{c}"] = (
        f"read an integer x. print x*{k}+{c}.",
        lambda rng: f"{_ints(rng, 1)[0]}\n",
        lambda s, k=k, c=c: str(int(s) * k + c),
      )
  return fam


def _code_record(identity: str, family: CodeFamily) -> dict[str, Any]:
  statement, make_input, solve = family
  # The tests depend on the problem only, so a problem looks the same in every draw.
  rng = np.random.default_rng(int.from_bytes(hashlib.sha256(identity.encode()).digest()[:8], "big"))
  tests = []
  for _ in range(CODE_TESTS_PER_PROBLEM):
    stdin = make_input(rng)
    tests.append({"input": stdin, "output": solve(stdin) + "\n"})
  return {"prompt": statement, "answer": "", "tests": tests, "task": "code", "id": identity}


def problems(name: str, split: str) -> list[dict[str, Any]]:
  """Every problem of a task's split, in a fixed order (records; arith_noisy with seed 0)."""
  if name not in TASKS:
    raise KeyError(f"unknown built-in task {name!r}; known: {names()}")
  if split not in SPLITS:
    raise KeyError(f"unknown split {split!r}; known: {SPLITS}")
  if name in ARITH_TASKS:
    return [
      _arith_record(name, a, op, b, 0) for a, op, b in _arith_problems() if split_of(f"arith:{a}{op}{b}") == split
    ]
  fams = _code_families()
  return [_code_record(f"code:{k}", f) for k, f in fams.items() if split_of(f"code:{k}") == split]


def make(name: str, split: str = "train", seed: int = 0, n: int | None = None) -> list[dict[str, Any]]:
  """`n` records of built-in task `name` from `split`, drawn and ordered by `seed`.

  n=None gives the whole split, shuffled. Deterministic: the same arguments give the same list.
  """
  pool = problems(name, split)
  rng = np.random.default_rng([int(seed), TASKS.index(name), SPLITS.index(split)])
  n = len(pool) if n is None else int(n)
  if n < 0:
    raise ValueError(f"n must be >= 0, got {n}")
  if n <= len(pool):
    idx = rng.permutation(len(pool))[:n]
  else:
    idx = rng.integers(0, len(pool), size=n)
  out = []
  for i in idx:
    rec = dict(pool[int(i)])
    if name in ("arith_noisy", "arith_mix"):
      rec["seed"] = int(seed)
    out.append(rec)
  return out
