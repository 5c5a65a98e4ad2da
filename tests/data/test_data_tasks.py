"""Built-in tasks: determinism, disjoint held-out splits, correct answers, code tests, char tokenizer."""

import re

import pytest

from maxnorm_jax.data import CharTokenizer, tasks
from maxnorm_jax.rewards.builtin import score_record


def _solve(prompt: str) -> int:
  m = re.fullmatch(r"(\d{1,2})([+-])(\d{1,2})=", prompt)
  assert m, prompt
  a, op, b = int(m[1]), m[2], int(m[3])
  return a + b if op == "+" else a - b


@pytest.mark.parametrize("name", ["arith", "arith_digits", "arith_noisy", "arith_mix"])
def test_arith_records_are_short_correct_and_deterministic(name):
  recs = tasks.make(name, "train", seed=3, n=200)
  assert len(recs) == 200
  assert recs == tasks.make(name, "train", seed=3, n=200)
  assert recs != tasks.make(name, "train", seed=4, n=200)
  for r in recs:
    assert r["task"] == name and r["tests"] is None
    assert len(r["prompt"]) <= 6
    assert int(r["answer"]) == _solve(r["prompt"])
  if name in ("arith_noisy", "arith_mix"):
    assert {r["seed"] for r in recs} == {3}
  assert len({r["prompt"] for r in recs}) == 200  # drawn without replacement


@pytest.mark.parametrize("name", tasks.names())
def test_held_out_split_is_disjoint_from_train(name):
  train = {r["prompt"] + repr(r["tests"]) for r in tasks.problems(name, "train")}
  test = {r["prompt"] + repr(r["tests"]) for r in tasks.problems(name, "test")}
  assert train and test and not train & test
  # about 10% of the problems are held out
  assert 0.05 < len(test) / (len(train) + len(test)) < 0.16
  # whatever the seed, a drawn test set stays outside train
  assert not {r["prompt"] + repr(r["tests"]) for r in tasks.make(name, "test", seed=9, n=5)} & train


def test_arith_problem_space_counts():
  assert len(tasks.problems("arith", "train")) + len(tasks.problems("arith", "test")) == 100 * 100 * 2
  assert len(tasks.make("arith", "test", seed=0)) == len(tasks.problems("arith", "test"))


def test_code_tests_are_consistent_with_statement():
  recs = {r["id"]: r for r in tasks.problems("code", "train") + tasks.problems("code", "test")}
  assert len(recs) == 88
  for rid, r in recs.items():
    assert r["task"] == "code" and r["answer"] == ""
    assert len(r["tests"]) == tasks.CODE_TESTS_PER_PROBLEM
    for case in r["tests"]:
      assert set(case) == {"input", "output"} and case["output"].endswith("\n")
  case = recs["code:sum2"]["tests"][0]
  a, b = map(int, case["input"].split())
  assert case["output"] == f"{a + b}\n"
  case = recs["code:lin_3_4"]["tests"][1]
  assert case["output"] == f"{int(case['input']) * 3 + 4}\n"
  case = recs["code:rev"]["tests"][2]
  assert case["output"] == case["input"].strip()[::-1] + "\n"


def test_records_score_with_the_reward_verifiers():
  for name in ("arith", "arith_digits", "arith_noisy"):
    for r in tasks.make(name, "test", seed=1, n=20):
      right = score_record(f"{r['answer']}", r).reward
      wrong = score_record(str(int(r["answer"]) + 1), r).reward
      assert right > 0.999 and wrong < 0.999, (name, r, right, wrong)


def test_unknown_task_and_split_raise():
  with pytest.raises(KeyError, match="unknown built-in task 'nope'"):
    tasks.make("nope")
  with pytest.raises(KeyError, match="unknown split 'val'"):
    tasks.make("arith", "val")
  with pytest.raises(ValueError, match="n must be >= 0"):
    tasks.make("arith", n=-1)


def test_char_tokenizer_round_trip_and_ids():
  tok = CharTokenizer()
  assert tok.vocab_size < 64
  assert (tok.pad_id, tok.bos_id, tok.eos_id) == (0, 1, 2) and tok.eos_ids == (2,)
  for name in tasks.names():
    for r in tasks.make(name, "train", seed=0, n=10):
      ids = tok.encode(r["prompt"])
      assert tok.unk_id not in ids
      assert tok.decode(ids) == r["prompt"]
  code = "print(sum(map(int,input().split())))\n"
  assert tok.decode(tok.encode(code)) == code
  assert tok.encode("7", add_special_tokens=True) == [1, tok.encode("7")[0]]
  assert tok.decode([1, 11, 2, 0], skip_special_tokens=False) == "<bos>7<eos><pad>"
  assert tok.encode("<bos>7<eos><pad>") == [1, 11, 2, 0] and tok.encode("<b") == tok.encode("<") + tok.encode("b")
  assert tok.encode("A") == tok.encode("a") and tok.encode("\u00e9") == [tok.unk_id]
  with pytest.raises(ValueError, match="outside the vocabulary"):
    tok.decode([tok.vocab_size])
