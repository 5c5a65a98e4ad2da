"""MathVerifier: equivalence in the formats models write, the exact-number guard, hard deadlines."""

import time

import pytest

from maxnorm_jax.rewards import MathVerifier, score_record

POSITIVE = [
  (r"The answer is $\boxed{\frac{1}{2}}$.", "1/2"),
  (r"so \boxed{0.5}", r"\frac12"),
  (r"\boxed{\dfrac{1}{2}}", r"\frac{1}{2}"),
  (r"First \boxed{3}, no wait: \boxed{19}", "19"),
  (r"\boxed{x^2+2x+1}", "(x+1)^2"),
  (r"\boxed{\{2, 1\}}", r"\{1,2\}"),
  (r"\boxed{\sqrt{18}}", r"3\sqrt{2}"),
  (r"$\boxed{2^{10}}$", "1024"),
  (r"\boxed{-\frac{3}{4}}", "-0.75"),
  (r"Therefore $x = \boxed{5}$", r"$5$"),
  ("The final answer is 7", "7"),
  (r"\boxed{\frac{\pi}{2}}", r"\pi/2"),
  (r"\boxed{0.333333}", r"\frac{1}{3}"),  # a decimal for a repeating fraction
  (r"\boxed{0.125}", r"\frac{1}{8}"),
  (r"\boxed{007}", "7"),
]

NEGATIVE = [
  (r"\boxed{\frac{1}{2^{98}}}", r"\frac{1}{2^{99}}"),  # rounding would call these equal
  (r"\boxed{0}", r"\frac{1}{2^{99}}"),
  (r"\boxed{123456789012345679}", "123456789012345678"),
  (r"\boxed{19} then \boxed{3}", "19"),  # the last box counts
  (r"\boxed{\frac{1}{3}}", "1/2"),
  (r"\boxed{x^2+1}", "(x+1)^2"),
  ("no answer here", "3"),
  (r"\boxed{\{1, 3\}}", r"\{1,2\}"),
  (r"\boxed{0.10000001}", "0.1"),  # rounding would call these equal
  (r"\boxed{0.1250001}", r"\frac{1}{8}"),
  (r"\boxed{0.0}", r"\frac{1}{2^{99}}"),
]


@pytest.fixture(scope="module")
def inline():
  return MathVerifier(isolate=False)


@pytest.fixture(scope="module")
def isolated():
  v = MathVerifier(timeout_s=1.5)
  v.start()
  yield v
  v.close()


@pytest.mark.parametrize("completion,gold", POSITIVE)
def test_equivalent(inline, completion, gold):
  s = inline.score(completion, gold)
  assert s.reward == 1.0 and s.resolution == 1.0 and s.valid, s.info
  assert s.info["correct"] is True


@pytest.mark.parametrize("completion,gold", NEGATIVE)
def test_not_equivalent(inline, completion, gold):
  s = inline.score(completion, gold)
  assert s.reward == 0.0 and s.valid, s.info
  assert s.info["correct"] is False


def test_exact_guard_info(inline):
  s = inline.score(r"\boxed{\frac{1}{2^{98}}}", r"\frac{1}{2^{99}}")
  assert s.info["exact"] is True and s.info["pred"] == r"\frac{1}{2^{98}}"
  assert s.info["extraction"] == "boxed"
  assert inline.score(r"\boxed{\frac{1}{2^{99}}}", r"\frac{1}{2^{99}}").reward == 1.0
  third = inline.score(r"\boxed{0.333333}", r"\frac{1}{3}")
  assert third.info["exact"] is False and third.reward == 1.0
  eighth = inline.score(r"\boxed{0.1250001}", r"\frac{1}{8}")
  assert eighth.info["exact"] is True and eighth.reward == 0.0


def test_deadline_kills_a_hanging_item_and_recovers(isolated):
  t0 = time.monotonic()
  s = isolated.score(r"\boxed{2^{2^{2^{2^{2^{2}}}}}}", "1")
  elapsed = time.monotonic() - t0
  assert s.reward == 0.0 and s.info["timeout"] is True and not s.valid
  assert 1.4 <= elapsed < 4.5
  s2 = isolated.score(r"\boxed{\frac{1}{2}}", "0.5")
  assert s2.reward == 1.0 and s2.info["correct"] is True


def test_isolated_agrees_with_inline(isolated, inline):
  for completion, gold in POSITIVE[:3] + NEGATIVE[:3]:
    assert isolated.score(completion, gold).reward == inline.score(completion, gold).reward


def test_math_record_dispatch():
  s = score_record(r"\boxed{\frac{2}{4}}", {"task": "math", "answer": "1/2"})
  assert s.reward == 1.0 and s.info["correct"] is True
