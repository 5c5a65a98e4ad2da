"""arith_mix: one built-in task whose batches hold sub-resolution, credible-small-gap and ordinary prompts."""

import collections

import numpy as np
import pytest

from maxnorm_jax.core import diagnostics
from maxnorm_jax.data import CharTokenizer, tasks
from maxnorm_jax.data.pipeline import build_pipeline
from maxnorm_jax.rewards import score_record
from maxnorm_jax.rewards.builtin import NOISE_SCALE, SMALL_GAP

DELTA_RES = 1e-2


def _record(kind: str) -> dict:
  return next(r for r in tasks.make("arith_mix", "train", seed=0, n=200) if r["kind"] == kind)


def test_reward_values_per_kind():
  noisy, small, digits = _record("noisy"), _record("small"), _record("digits")
  right = score_record(noisy["answer"], noisy)
  assert 1.0 - NOISE_SCALE <= right.reward < 1.0 and right.info["kind"] == "noisy"
  assert 0.0 < score_record("99999", noisy).reward <= NOISE_SCALE
  assert score_record(small["answer"], small).reward == SMALL_GAP
  units_only = str(int(small["answer"]) + (10 if int(small["answer"]) >= 0 else -10))
  assert score_record(units_only, small).reward == SMALL_GAP  # only the units digit counts
  wrong_units = str(int(small["answer"]) + 1)
  assert score_record(wrong_units, small).reward == 0.0
  assert score_record("no answer", small).reward == 0.0
  assert score_record(digits["answer"], digits).reward == 1.0
  assert score_record(digits["answer"], {**digits, "task": "arith_digits"}).reward == 1.0
  with pytest.raises(ValueError, match="has kind 'other'"):
    score_record("1", {**small, "kind": "other"})


def test_small_gap_is_credible_but_low_variance():
  # A group of 8 with 1..7 right answers: span SMALL_GAP >= delta_res, std (ddof 0) < 1e-2.
  rewards = np.array([[SMALL_GAP] * k + [0.0] * (8 - k) for k in range(1, 8)], np.float32)
  assert float(diagnostics.small_gap_frac(rewards, None, DELTA_RES)) == 1.0
  assert float(diagnostics.subres_frac(rewards, None, DELTA_RES)) == 0.0
  assert rewards.std(axis=1).max() < 1e-2


def test_kind_shares_and_determinism():
  probs = tasks.problems("arith_mix", "train") + tasks.problems("arith_mix", "test")
  shares = collections.Counter(r["kind"] for r in probs)
  n = sum(shares.values())
  assert n == 20000
  assert abs(shares["noisy"] / n - 0.3) < 0.02
  assert abs(shares["small"] / n - 0.3) < 0.02
  assert abs(shares["digits"] / n - 0.4) < 0.02
  # the kind belongs to the problem, whatever the seed or split draw
  a = {r["prompt"]: r["kind"] for r in tasks.make("arith_mix", "train", seed=1, n=300)}
  b = {r["prompt"]: r["kind"] for r in tasks.make("arith_mix", "train", seed=2, n=3000)}
  assert all(b[p] == k for p, k in a.items() if p in b)
  assert all(r["kind"] == tasks.mix_kind(r["prompt"]) for r in probs[:500])


def test_one_batch_holds_all_three_regimes():
  it = build_pipeline("builtin:arith_mix", tokenizer=CharTokenizer(), batch_size=64, seed=0, max_prompt_len=8)
  records = next(it)["records"]
  kinds = collections.Counter(r["kind"] for r in records)
  assert set(kinds) == {"noisy", "small", "digits"} and min(kinds.values()) >= 8
  # Score groups of 8 made of the right answer (2 samples) and wrong ones (6): noisy groups land
  # below delta_res only when all are wrong; here each kind gives its regime.
  rows = []
  for r in records:
    gold = int(r["answer"])
    wrong = [str(gold + 1), str(gold + 2), str(gold + 3), str(gold + 4), str(gold + 5), str(gold + 6)]
    answers = ([str(gold)] * 2 + wrong) if r["kind"] != "noisy" else [str(gold + 1 + i) for i in range(8)]
    rows.append([score_record(a, r).reward for a in answers])
  rewards = np.array(rows, np.float32)
  kind = np.array([r["kind"] for r in records])
  sub = np.asarray(diagnostics.subres_frac(rewards[kind == "noisy"], None, DELTA_RES))
  small = np.asarray(diagnostics.small_gap_frac(rewards[kind == "small"], None, DELTA_RES))
  ordinary = rewards[kind == "digits"].std(axis=1)
  assert float(sub) == 1.0 and float(small) == 1.0 and ordinary.min() >= 1e-2
  whole = float(diagnostics.subres_frac(rewards, None, DELTA_RES))
  assert whole == pytest.approx(kinds["noisy"] / 64)
