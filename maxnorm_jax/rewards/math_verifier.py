"""MathVerifier: math-verify equivalence of the last \\boxed{} answer, with a hard deadline.

Equivalence is math-verify's (sympy-backed: fractions, radicals, sets, intervals, equations,
LaTeX variants). One guard is ours: when both answers are exact rational numbers (integers, decimal
literals, fractions, powers such as 1/2^{99}; no percent sign) they are compared exactly, because
math-verify's numeric comparison rounds (it calls 1/2^99 and 1/2^98 equal, and 0.1 and
0.10000001). A decimal against a fraction without a finite decimal expansion (0.333333 against
1/3) is left to math-verify's rounding.

Each item runs in a killable child process (`KillableWorker`) with math-verify's own SIGALRM
timeouts disabled; at `timeout_s` the child is killed and the item gets an invalid score
(valid=False, info["timeout"] = True): a verifier that could not decide says nothing about the
completion. Inside a verifier-pool worker the check runs inline, the pool being the
process killed at the deadline.
"""

from __future__ import annotations

import logging
import re
from typing import Any

from maxnorm_jax.rewards import worker as worker_lib
from maxnorm_jax.rewards.extract import last_boxed
from maxnorm_jax.rewards.score import Score

logging.getLogger("math_verify").setLevel(logging.ERROR)


def _strip_dollars(text: str) -> str:
  text = text.strip()
  while len(text) >= 2 and text[0] == "$" and text[-1] == "$":
    text = text[1:-1].strip()
  return text


_DECIMAL = re.compile(r"[-+]?(?:\d+\.\d*|\.\d+|\d+)")


def _exact_rational(expr: Any, text: str):
  """(value, is_decimal): `expr` as an exact sympy Rational when it is a plain exact number: a
  decimal literal (taken digit for digit, not as a float), or an expression without '.', '%',
  symbols or floats that evaluates to a rational (1/2^{99}, \\frac{3}{4}, 2^{10}). Else None."""
  import sympy

  t = text.strip()
  if _DECIMAL.fullmatch(t):
    return sympy.Rational(t), "." in t
  if "." in t or "%" in t:
    return None
  if not isinstance(expr, sympy.Expr) or expr.free_symbols or expr.atoms(sympy.Float):
    return None
  value = expr.doit()
  return (value, False) if value.is_Rational else None


def _terminates(value) -> bool:
  """True when a rational has a finite decimal expansion (denominator 2^a 5^b)."""
  q = int(value.q)
  for p in (2, 5):
    while q % p == 0:
      q //= p
  return q == 1


def check(completion: str, gold: str) -> dict[str, Any]:
  """Compares the completion's last boxed answer with `gold`, no deadline (run it in a killable
  process). Returns a dict: correct, pred (answer text), gold, extraction ("boxed" / "fallback"
  / "none"), exact (True when the exact-rational guard decided), canonical (the parsed answer's
  string form, when it parsed)."""
  from math_verify import parse, verify

  gold_text = last_boxed(gold)
  gold_text = _strip_dollars(gold if gold_text is None else gold_text)
  gold_parsed = parse(f"$\\boxed{{{gold_text}}}$", parsing_timeout=None)
  boxed = last_boxed(completion)
  if boxed is not None:
    pred_text, extraction = boxed.strip(), "boxed"
    pred_parsed = parse(f"$\\boxed{{{pred_text}}}$", parsing_timeout=None)
  else:
    pred_parsed = parse(completion, parsing_timeout=None)
    extraction = "fallback" if pred_parsed else "none"
    pred_text = str(pred_parsed[-1]) if pred_parsed else ""
  info: dict[str, Any] = {"pred": pred_text, "gold": gold_text, "extraction": extraction, "exact": False}
  if pred_parsed:  # math-verify's parsed form: the answer maj@k votes on ("1/2" and "\frac{1}{2}" agree)
    info["canonical"] = str(pred_parsed[0])
  if not pred_parsed or not gold_parsed:
    info["correct"] = False
    info["parse_failed"] = "pred" if not pred_parsed else "gold"
    return info
  g_exact = _exact_rational(gold_parsed[0], gold_text)
  p_exact = _exact_rational(pred_parsed[0], pred_text) if extraction == "boxed" else None
  if g_exact is not None and p_exact is not None:
    (g, g_dec), (p, p_dec) = g_exact, p_exact
    # A decimal against a non-terminating fraction (0.333333 vs 1/3) is an approximation by
    # nature: math-verify's rounding decides. Every other pair of exact numbers compares exactly.
    if not ((g_dec and not p_dec and not _terminates(p)) or (p_dec and not g_dec and not _terminates(g))):
      info["exact"] = True
      info["correct"] = bool(g == p)
      return info
  info["correct"] = bool(verify(gold_parsed, pred_parsed, timeout_seconds=None))
  return info


def warmup() -> None:
  """Imports math-verify and sympy and runs one check (so the first item is not charged for it)."""
  check("\\boxed{\\frac{1}{2}}", "0.5")


class MathVerifier:
  """Scores a completion against a gold answer with math-verify under a hard deadline.

  Args:
    timeout_s: wall-clock deadline per item; past it the check is killed and the reward is 0.
    isolate: run each check in a killable child process (default: yes, unless this process is
      itself a verifier-pool worker).
  """

  resolution = 1.0

  def __init__(self, timeout_s: float = 5.0, isolate: bool | None = None):
    self.timeout_s = float(timeout_s)
    self.isolate = (not worker_lib.IN_WORKER) if isolate is None else bool(isolate)
    self._worker = worker_lib.KillableWorker(check, warmup) if self.isolate else None

  def score(self, completion: str, gold: str) -> Score:
    """Reward 1.0 if the last \\boxed{} answer of `completion` equals `gold`, else 0.0."""
    if self._worker is None:
      info = check(completion, gold)
      return Score(float(info["correct"]), 1.0, info)
    status, value = self._worker.call((completion, gold), self.timeout_s)
    if status == "ok":
      return Score(float(value["correct"]), 1.0, value)
    if status == "timeout":
      return Score(0.0, 1.0, {"timeout": True, "timeout_s": self.timeout_s}, valid=False)
    return Score(0.0, 1.0, {"crash": status, "error": value}, valid=False)

  def start(self) -> None:
    """Starts and warms up the child process now (otherwise the first score() does)."""
    if self._worker is not None:
      self._worker.start()

  def close(self) -> None:
    """Stops the child process (a later score() starts a new one)."""
    if self._worker is not None:
      self._worker.close()

  def __enter__(self):
    return self

  def __exit__(self, *exc):
    self.close()
