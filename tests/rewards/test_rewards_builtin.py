"""Built-in task verifiers (arith, arith_digits, arith_noisy) and answer extraction."""

import pytest

from maxnorm_jax.rewards import integer_answer, last_boxed, score_record, task_names, verifier_for
from maxnorm_jax.rewards.builtin import NOISE_SCALE, ArithNoisyVerifier


def test_last_boxed_nested_and_last():
  assert last_boxed(r"a \boxed{1} b \boxed{\frac{1}{2}} c") == r"\frac{1}{2}"
  assert last_boxed(r"\boxed{ {x}^{2} }") == " {x}^{2} "
  assert last_boxed(r"\boxed{unclosed") is None
  assert last_boxed("none") is None


@pytest.mark.parametrize(
  "text,answer,source",
  [
    ("19", "19", "last_integer"),
    ("x 3 then 19<eos>", "19", "last_integer"),
    (r"\boxed{-7} and later 3", "-7", "boxed"),
    (r"\boxed{1,024}", "1024", "boxed"),
    (r"\boxed{x = 12}", "x=12", "boxed"),
    (r"\boxed{3.5}", "3.5", "boxed"),
    ("no digits", None, "none"),
    ("-5", "-5", "last_integer"),
  ],
)
def test_integer_answer(text, answer, source):
  assert integer_answer(text) == (answer, source)


@pytest.mark.parametrize(
  "completion,reward",
  [
    ("19", 1.0),
    ("the sum is 19", 1.0),
    (r"\boxed{19} maybe 20", 1.0),
    ("18", 0.0),
    ("", 0.0),
    ("190", 0.0),
    ("-19", 0.0),
    (r"\boxed{x = 19}", 0.0),
    (r"\boxed{19.0}", 0.0),
    ("019", 1.0),
  ],
)
def test_arith_binary(completion, reward):
  s = verifier_for("arith").score(completion, {"task": "arith", "answer": "19"})
  assert s.reward == reward and s.resolution == 1.0 and s.valid


@pytest.mark.parametrize(
  "gold,completion,reward,k",
  [
    ("123", "123", 1.0, 3),
    ("123", "124", 2 / 3, 3),
    ("123", "23", 2 / 3, 3),
    ("123", "9123", 1.0, 3),
    ("-123", "-124", 3 / 4, 4),
    ("-123", "123", 3 / 4, 4),
    ("-123", "-999", 1 / 4, 4),
    ("7", "x", 0.0, 1),
    ("40", "0", 1 / 2, 2),
    ("5", "-5", 1.0, 1),
  ],
)
def test_arith_digits_grid(gold, completion, reward, k):
  s = verifier_for("arith_digits").score(completion, {"task": "arith_digits", "answer": gold})
  assert s.reward == pytest.approx(reward)
  assert s.resolution == pytest.approx(1 / k)
  assert s.info["positions"] == k
  assert round(s.reward * k) == pytest.approx(s.reward * k)


def test_arith_noisy_jitter():
  v = verifier_for("arith_noisy")
  rec = {"task": "arith_noisy", "answer": "19"}
  right, wrong = v.score("19", rec), v.score("18", rec)
  assert 0 <= right.info["jitter"] <= NOISE_SCALE and 0 <= wrong.info["jitter"] <= NOISE_SCALE
  assert right.reward == pytest.approx(1.0 - right.info["jitter"], abs=0)
  assert wrong.reward == wrong.info["jitter"]
  assert 1.0 - NOISE_SCALE <= right.reward < 1.0 and 0.0 < wrong.reward <= NOISE_SCALE
  assert right.resolution == 1.0
  assert v.score("19", rec).reward == right.reward  # deterministic
  assert ArithNoisyVerifier(seed=1).score("19", rec).reward != right.reward
  jit = {v.jitter(str(i)) for i in range(50)}
  assert len(jit) == 50


def test_score_record_dispatch_and_unknown_task():
  assert score_record("7", {"task": "arith", "answer": "7"}).reward == 1.0
  assert score_record("17", {"task": "arith_digits", "answer": "27"}).reward == 0.5
  assert set(task_names()) == {"arith", "arith_digits", "arith_mix", "arith_noisy", "code", "math"}
  with pytest.raises(KeyError, match="no verifier"):
    verifier_for("chess")


def test_pool_deadlines_by_task():
  from maxnorm_jax.rewards import deadline_for

  assert deadline_for({"task": "math", "answer": "1"}) == 5.0
  assert deadline_for({"task": "arith", "answer": "1"}) == 5.0
  assert deadline_for({"task": "code", "tests": [{"input": "", "output": ""}] * 2}) == 2 * (5.0 + 2.0) + 5.0
  assert deadline_for({"task": "code", "tests": "assert True"}) == 5.0 + 2.0 + 5.0
