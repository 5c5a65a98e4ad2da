"""Seed 000's Table 3 on the bandit: the rows' scales, directions and KL balance."""

import numpy as np

from maxnorm_jax.lab import methods, table


def _rows(lab_result):
  return {r.label: r for r in lab_result.rows}


def test_rows_cover_the_registry(lab_result):
  assert methods.missing_estimators() == []
  assert [r.label for r in lab_result.rows] == [m.label for m in methods.TABLE_ROWS]
  text = table.format_table(lab_result.rows)
  for m in methods.TABLE_ROWS:
    assert m.label in text


def test_inverse_scale_tail(lab_result):
  rows = _rows(lab_result)
  grpo, maxnorm, p90 = rows["GRPO"], rows["MaxNorm-RLOO"], rows["p90+Protocol"]
  assert grpo.inv_p95 > 50 * maxnorm.inv_p95  # GRPO's 1/std has no bound on jitter groups
  assert grpo.inv_p99 > 1000
  for row in (maxnorm, rows["MaxNorm-Dr.GRPO"], p90):
    assert row.inv_p99 <= 100.0 * (1 + 1e-5)  # s_q >= tau_res = 1e-2
  for label in ("RLOO+Protocol", "Dr.GRPO", "GOPO"):
    assert rows[label].inv_p95 == rows[label].inv_p99 == 1.0


def test_direction_against_the_cardinal_gradient(lab_result):
  rows = _rows(lab_result)
  for label in ("RLOO+Protocol", "Dr.GRPO", "REINFORCE++-baseline"):
    assert abs(rows[label].dir_cardinal - 1.0) < 1e-5  # one scale for every group: same direction
  assert rows["GRPO"].dir_cardinal < 0.9  # per-group 1/std reweights prompts
  assert rows["MaxNorm-RLOO"].dir_cardinal > rows["GRPO"].dir_cardinal + 0.1


def test_bounded_advantages(lab_result):
  rows = _rows(lab_result)
  assert rows["MaxNorm-RLOO"].max_abs_c <= 1.0 + 1e-6
  assert rows["MaxNorm-Dr.GRPO"].max_abs_c <= 1.0 + 1e-6
  assert rows["GRPO"].max_abs_c > 1.5


def test_reward_to_kl_balance(lab_result):
  rows = _rows(lab_result)
  assert rows["RLOO+Protocol"].r_over_kl < 0.5  # credible small gaps are KL dominated
  assert rows["Dr.GRPO"].r_over_kl < 0.5
  assert rows["MaxNorm-RLOO"].r_over_kl > 1.0
  assert rows["GRPO+beta_q-comp"].r_over_kl < rows["GRPO"].r_over_kl  # beta_q-comp adds KL weight
  assert rows["RLOO+Protocol"].cos_reward_neg_kl < rows["MaxNorm-RLOO"].cos_reward_neg_kl


def test_kl_columns(lab_result):
  rows = _rows(lab_result)
  for r in rows.values():
    assert np.isfinite(r.mean_kl) and 0 <= r.mean_kl <= r.kl_p95
  assert rows["GRPO"].mean_kl > rows["RLOO+Protocol"].mean_kl


def test_each_lab_row_is_a_row_of_the_method_table():
  from maxnorm_jax.method_rows import METHODS

  for m in methods.TABLE_ROWS:
    row = METHODS[m.row]
    assert (m.estimator, m.protocol, m.binning) == (
      row["estimator"],
      row["protocol"]["gate"],
      row["protocol"]["binning"],
    )
    assert dict(m.params) == row.get("params", {})
  assert methods.MAXNORM_RLOO.row == "maxnorm_rloo_nobin" and not methods.MAXNORM_RLOO.binning
  assert METHODS["maxnorm_rloo"]["protocol"]["binning"]  # the trainer's default row bins
