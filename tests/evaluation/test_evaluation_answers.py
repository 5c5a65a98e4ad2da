"""The canonical answers maj@k votes on, and the tokenizer files an export copies."""

import os

from maxnorm_jax.evaluation import canonical_answer
from maxnorm_jax.export import copy_tokenizer_files
from maxnorm_jax.rewards.math_verifier import check


def test_canonical_answers_of_arithmetic_and_math():
  assert canonical_answer("arith", {"pred": "007", "source": "last_integer"}) == "7"
  assert canonical_answer("arith_digits", {"pred": "-12"}) == "-12"
  assert canonical_answer("arith", {"pred": None}) is None
  assert canonical_answer("arith", {"pred": "3.5"}) is None
  a = check("so \\boxed{\\frac{1}{2}}", "0.5")
  b = check("it is \\boxed{1/2}", "0.5")
  assert a["correct"] and b["correct"] and a["pred"] != b["pred"]
  assert canonical_answer("math", a) == canonical_answer("math", b) == "1/2"  # one vote, two spellings
  assert canonical_answer("math", {"pred": "", "parse_failed": "pred"}) is None
  assert canonical_answer("math", {"timeout": True}) is None


def test_copy_tokenizer_files_keeps_the_chat_template(tmp_path):
  src, out = tmp_path / "src", tmp_path / "out"
  src.mkdir()
  out.mkdir()
  for name in ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja", "model.safetensors"):
    (src / name).write_text(name)
  assert copy_tokenizer_files(str(src), str(out)) == ["tokenizer.json", "tokenizer_config.json", "chat_template.jinja"]
  assert sorted(os.listdir(out)) == ["chat_template.jinja", "tokenizer.json", "tokenizer_config.json"]
  assert (out / "chat_template.jinja").read_text() == "chat_template.jinja"
