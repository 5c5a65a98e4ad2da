"""Verifiers of the built-in tasks, and `score_record`, the dispatch the verifier pool runs.

Records are dicts with `prompt`, `answer`, `task` (and `tests` for code). Tasks:

- "arith": reward 1.0 when the completion's answer (content of the last \\boxed{} if any, else
  the last integer, regex -?\\d+) equals the integer `answer`, else 0.0. Resolution 1.0.
- "arith_digits": the fraction of the answer's k positions matched, right-aligned: its digits,
  plus the sign as one more position for a negative answer. Rewards lie on a 1/k grid;
  resolution 1/k.
- "arith_noisy": the binary arith reward moved into [0, 1] by a deterministic jitter in
  [0, 1e-4] (a hash of the seed and the completion): correct -> 1 - jitter, wrong -> jitter.
  Resolution 1.0; info["jitter"] says the jitter.
- "arith_mix": by record["kind"]: "noisy" -> the arith_noisy reward, "digits" -> the arith_digits
  reward, "small" -> SMALL_GAP (0.018) when the units digit of the answer is right, else 0.0
  (resolution SMALL_GAP: a gap >= delta_res = 1e-2, while a group's std (ddof 0) stays <= 0.009).
- "code": `CodeVerifier` on record["tests"].
- "math": `MathVerifier` on record["answer"].
"""

from __future__ import annotations

import hashlib
from typing import Any, Callable

from maxnorm_jax.rewards.code_verifier import CodeVerifier
from maxnorm_jax.rewards.extract import integer_answer
from maxnorm_jax.rewards.math_verifier import MathVerifier
from maxnorm_jax.rewards.score import Score

NOISE_SCALE = 1e-4
SMALL_GAP = 0.018


def _as_int(text: str | None) -> int | None:
  try:
    return int(text) if text is not None else None
  except ValueError:
    return None


class ArithVerifier:
  """Binary exact-integer reward of the "arith" task."""

  resolution = 1.0

  def score(self, completion: str, record: dict[str, Any]) -> Score:
    pred, source = integer_answer(completion)
    gold = int(str(record["answer"]).strip())
    p = _as_int(pred)
    correct = p is not None and p == gold
    return Score(float(correct), 1.0, {"pred": pred, "gold": str(gold), "source": source})


class ArithDigitsVerifier:
  """Per-position partial credit of the "arith_digits" task (1/k grid)."""

  def score(self, completion: str, record: dict[str, Any]) -> Score:
    gold_text = str(record["answer"]).strip()
    gold = int(gold_text)
    gold_digits = str(abs(gold))
    k = len(gold_digits) + (1 if gold < 0 else 0)
    pred, source = integer_answer(completion)
    p = _as_int(pred)
    matched = 0
    if p is not None:
      pred_digits = str(abs(p))
      for i in range(1, len(gold_digits) + 1):
        if i <= len(pred_digits) and pred_digits[-i] == gold_digits[-i]:
          matched += 1
      if gold < 0 and p < 0:
        matched += 1
    return Score(
      matched / k, 1.0 / k, {"pred": pred, "gold": gold_text, "source": source, "matched": matched, "positions": k}
    )


class ArithNoisyVerifier:
  """The "arith" reward with a deterministic jitter in [0, NOISE_SCALE], clipped into [0, 1]."""

  resolution = 1.0

  def __init__(self, seed: int = 0):
    self.seed = int(seed)
    self._arith = ArithVerifier()

  def jitter(self, completion: str, seed: int | None = None) -> float:
    """The deterministic jitter of this completion text, in [0, NOISE_SCALE]."""
    seed = self.seed if seed is None else int(seed)
    digest = hashlib.sha256(f"{seed}\x00{completion}".encode()).digest()
    return int.from_bytes(digest[:8], "big") / float(1 << 64) * NOISE_SCALE

  def score(self, completion: str, record: dict[str, Any]) -> Score:
    base = self._arith.score(completion, record)
    jitter = self.jitter(completion, record.get("seed"))
    reward = min(1.0, max(0.0, base.reward - jitter if base.reward >= 1.0 else base.reward + jitter))
    return Score(reward, 1.0, {**base.info, "binary": base.reward, "jitter": jitter})


class ArithMixVerifier:
  """The "arith_mix" task: the reward of the record's kind (noisy, small or digits)."""

  def __init__(self, seed: int = 0):
    self._noisy = ArithNoisyVerifier(seed)
    self._digits = ArithDigitsVerifier()

  def _small(self, completion: str, record: dict[str, Any]) -> Score:
    pred, source = integer_answer(completion)
    gold = str(abs(int(str(record["answer"]).strip())))
    p = _as_int(pred)
    right = p is not None and str(abs(p))[-1] == gold[-1]
    return Score(SMALL_GAP * float(right), SMALL_GAP, {"pred": pred, "gold": gold, "source": source})

  def score(self, completion: str, record: dict[str, Any]) -> Score:
    kind = record.get("kind")
    if kind == "noisy":
      s = self._noisy.score(completion, record)
    elif kind == "digits":
      s = self._digits.score(completion, record)
    elif kind == "small":
      s = self._small(completion, record)
    else:
      raise ValueError(f"arith_mix record {record.get('prompt')!r} has kind {kind!r}; want noisy, small or digits")
    return Score(s.reward, s.resolution, {**s.info, "kind": kind})


class CodeTaskVerifier:
  """The "code" task: `CodeVerifier` on record["tests"]."""

  def __init__(self, timeout_s: float = 5.0, memory_mb: int = 512, **sandbox_kwargs: Any):
    self.verifier = CodeVerifier(timeout_s=timeout_s, memory_mb=memory_mb, **sandbox_kwargs)

  def score(self, completion: str, record: dict[str, Any]) -> Score:
    return self.verifier.score(completion, record["tests"])


class MathTaskVerifier:
  """The "math" task: `MathVerifier` on record["answer"]."""

  def __init__(self, timeout_s: float = 5.0, isolate: bool | None = None):
    self.verifier = MathVerifier(timeout_s=timeout_s, isolate=isolate)

  def score(self, completion: str, record: dict[str, Any]) -> Score:
    return self.verifier.score(completion, str(record["answer"]))


#: task name -> factory of its verifier.
TASK_VERIFIERS: dict[str, Callable[..., Any]] = {
  "arith": ArithVerifier,
  "arith_digits": ArithDigitsVerifier,
  "arith_noisy": ArithNoisyVerifier,
  "arith_mix": ArithMixVerifier,
  "code": CodeTaskVerifier,
  "math": MathTaskVerifier,
}

#: The tasks this module defines; others in TASK_VERIFIERS were registered by the user.
BUILTIN_TASKS = tuple(TASK_VERIFIERS)

#: Default wall-clock deadlines (seconds) of the pool per item, by task.
MATH_TIMEOUT_S = 5.0
CODE_TIMEOUT_S = 5.0
SIMPLE_TIMEOUT_S = 5.0


def task_names() -> list[str]:
  """Names of the built-in tasks that have a verifier."""
  return sorted(TASK_VERIFIERS)


def verifier_for(task_name: str, **kwargs: Any):
  """A new verifier of a built-in task; use as `verifier_for("arith").score(completion, record)`."""
  try:
    return TASK_VERIFIERS[task_name](**kwargs)
  except KeyError:
    raise KeyError(f"no verifier for task {task_name!r}; known: {task_names()}") from None


_CACHE: dict[str, Any] = {}


def _cached(task: str):
  if task not in _CACHE:
    if task == "math":
      _CACHE[task] = verifier_for(task, timeout_s=MATH_TIMEOUT_S)
    elif task == "code":
      _CACHE[task] = verifier_for(task, timeout_s=CODE_TIMEOUT_S)
    else:
      _CACHE[task] = verifier_for(task)
  return _CACHE[task]


def score_record(completion: str, record: dict[str, Any]) -> Score:
  """Scores `completion` with the verifier of record["task"] (the verifier pool's default)."""
  return _cached(str(record["task"])).score(completion, record)


def deadline_for(record: dict[str, Any]) -> float:
  """The pool's hard wall-clock deadline for one record (seconds)."""
  task = record.get("task")
  if task == "math":
    return MATH_TIMEOUT_S
  if task == "code":
    return _cached("code").verifier.deadline_s(record.get("tests", ""))
  return SIMPLE_TIMEOUT_S


def check_record(record: dict[str, Any], default_task: str | None = None) -> str | None:
  """Why `record` cannot be scored by its task's verifier (None when it can): an unknown task, an
  arith answer that is not an integer literal, an empty math answer, a code row without tests.
  Run at load time, so an unscorable row is named by its file and line before training starts."""
  task = record.get("task") or default_task
  if task not in TASK_VERIFIERS:
    return f"no verifier for task {task!r}; known: {task_names()}"
  answer = str(record.get("answer", "")).strip()
  if task in ("arith", "arith_digits", "arith_noisy") and _as_int(answer) is None:
    return f"task {task!r} needs an integer answer, got {record.get('answer')!r}"
  if task == "math" and not answer:
    return "task 'math' needs a non-empty answer"
  if task == "code" and not record.get("tests"):
    return "task 'code' needs tests"
  return None


def importable_verifiers() -> dict[str, Callable[..., Any]]:
  """The user-registered entries of TASK_VERIFIERS, to be installed in each pool worker (a fresh
  interpreter that only sees the built-in ones). ValueError for a factory a worker cannot import."""
  import importlib

  extra = {k: v for k, v in TASK_VERIFIERS.items() if k not in BUILTIN_TASKS}
  for name, factory in extra.items():
    module, qualname = getattr(factory, "__module__", None), getattr(factory, "__qualname__", "")
    found = None
    if module and module != "__main__" and "<locals>" not in qualname:
      try:
        found = importlib.import_module(module)
        for part in qualname.split("."):
          found = getattr(found, part)
      except (ImportError, AttributeError):
        found = None
    if found is not factory:
      raise ValueError(
        f"TASK_VERIFIERS[{name!r}] = {factory!r} was registered in this process, but verifier pool workers are "
        f"fresh interpreters and cannot import it (module {module!r}, name {qualname!r}); define it at the top "
        "level of an importable module"
      )
  return extra


def install_then_warmup(extra: dict[str, Callable[..., Any]], then: Callable[[], Any] | None) -> None:
  """A pool worker's start: register the parent's extra verifiers, then run the usual warm-up."""
  TASK_VERIFIERS.update(extra)
  if then is not None:
    then()


def warmup() -> None:
  """Imports what scoring needs (math-verify, sympy) so a pool worker's first item is not slow."""
  from maxnorm_jax.rewards import math_verifier

  math_verifier.warmup()
