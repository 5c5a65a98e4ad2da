"""Every method row of configs/default.py trains through `runlocal` in this process (compilations
are shared across rows), and logs every metric the issue names."""

import math
import os

import numpy as np
import pytest
from trainer_helpers import ROOT, STEP_METRICS, config_module, read_rows, runlocal_config

from maxnorm_jax.testing import notebooks
from maxnorm_jax.train import run_data, train

METHODS = sorted(config_module().METHODS)
EXPECTED_ROWS = {
  "grpo",
  "grpo_protocol",
  "rloo_protocol",
  "dr_grpo",
  "reinforce_pp",
  "reinforce_pp_baseline",
  "p90_protocol",
  "grpo_beta_comp",
  "gopo",
  "maxnorm_rloo",
  "maxnorm_rloo_nobin",
  "maxnorm_rloo_protocol_off",
  "maxnorm_dr_grpo",
  "maxnorm_dr_grpo_nobin",
  "avspo",
  "f_grpo",
  "dapo",
  "filter_drop",
}


def test_the_table_has_every_row_of_the_issue():
  assert set(METHODS) == EXPECTED_ROWS


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
  return {}


def _run(runs, tmp_path_factory, method):
  if method not in runs:
    workdir = str(tmp_path_factory.mktemp(method))
    rows = train(runlocal_config(method), workdir)
    runs[method] = (workdir, rows)
  return runs[method]


@pytest.mark.parametrize("method", METHODS)
def test_method_row_runs_locally(method, runs, tmp_path_factory):
  workdir, rows = _run(runs, tmp_path_factory, method)
  steps = [r["step"] for r in rows]
  assert steps == [0, 1, 2, 3]  # the first evaluation, then 3 RL steps
  assert "eval/reward_mean" in rows[0] and "eval/reward_mean" in rows[-1]
  for r in rows[1:]:
    missing = [k for k in STEP_METRICS if k not in r]
    assert not missing, f"{method} step {r['step']}: missing {missing}"
    for k in ("reward_mean", "kl_mean", "acr", "entropy", "grad_norm", "response_len_mean"):
      assert r[k] is not None and math.isfinite(r[k]), (method, k, r[k])
    assert 0.0 <= r["acr"] <= 1.0 and 0.0 <= r["zero_group_frac"] <= 1.0
  assert "r_over_kl" in rows[2] and "dir_cardinal" in rows[2]  # diagnostics_every = 2
  assert rows == read_rows(workdir)
  assert sorted(os.listdir(os.path.join(workdir, "checkpoints"))) == ["2", "3"]
  card = run_data.load_card(workdir)
  assert card["rewards"].shape == (4, 4) and card["scale"].shape == (4,)
  row = config_module().METHODS[method]
  if row["estimator"].startswith("maxnorm"):
    assert np.all(np.abs(card["advantages"]) <= 1.0 + 1e-6)
    assert all(r["inv_scale_p99"] <= 100.0 + 1e-3 for r in rows[1:])
  if row.get("filter", {}).get("mode") == "resample":
    assert all(1 <= r["filter/rounds"] <= 4 for r in rows[1:])
  if row.get("filter", {}).get("mode") == "drop":
    assert all(0.0 <= r["filter/kept_frac"] <= 1.0 for r in rows[1:])
  if row["protocol"]["gate"]:
    # gated groups leave both branches: no group is valid without a credible gap
    spans = card["rewards"].max(1) - np.where(card["mask"], card["rewards"], np.inf).min(1)
    assert not np.any(card["valid"] & (spans < 1e-2))


def test_inspect_run_notebook_executes_on_a_runlocal_run(runs, tmp_path_factory):
  workdir, _ = _run(runs, tmp_path_factory, "maxnorm_rloo")
  nb = notebooks.execute_notebook(os.path.join(ROOT, "notebooks", "inspect_run.py"), workdir, timeout=180)
  errors = [o for c in nb.cells for o in c.get("outputs", []) if o.output_type == "error"]
  assert errors == []
  assert "maxnorm_rloo" in notebooks.outputs_text(nb)
  assert notebooks.count_outputs(nb, "image/png") >= 3


def test_kl_in_reward_entropy_bonus_epochs_and_accumulation(tmp_path):
  c = runlocal_config(
    "grpo_protocol", loss={"kl_in": "reward", "entropy_coef": 0.01}, train={"ppo_epochs": 2, "grad_accum": 2}
  )
  rows = train(c, str(tmp_path))
  for r in rows[1:]:
    assert r["kl_loss"] == 0.0  # the KL went into the reward, not the loss
    assert math.isfinite(r["loss"]) and math.isfinite(r["grad_norm"])
  # with KL in the reward the shaped rewards differ from the verifier's once the policy moved
  assert rows[3]["kl_mean"] > 0
  assert rows[3]["reward_mean"] != rows[3]["reward_raw_mean"]


def test_old_logp_recompute_against_the_samplers(runs, tmp_path_factory, tmp_path):
  """rollout.old_logp: "sampler" (the default, the maxnorm_rloo row above) and "recompute" train the
  same curve up to float32 rounding; both log the sampler/trainer mismatch on diagnostics steps."""
  _, sampler_rows = _run(runs, tmp_path_factory, "maxnorm_rloo")
  rows = train(runlocal_config("maxnorm_rloo", rollout={"old_logp": "recompute"}), str(tmp_path))
  buckets = ["logp_mismatch_mean/len_le_1", "logp_mismatch_mean/len_le_4"]  # runlocal: 4 new tokens
  for r in (rows[2], sampler_rows[2]):  # diagnostics_every = 2
    assert 0.0 <= r["logp_mismatch_mean"] <= r["logp_mismatch_max"] < 1e-5
    assert all(k in r for k in buckets)
  assert "logp_mismatch_mean" not in rows[1] and "logp_mismatch_mean" not in sampler_rows[3]
  for k in ("loss", "grad_norm", "kl_mean"):
    np.testing.assert_allclose([r[k] for r in rows[1:]], [r[k] for r in sampler_rows[1:]], rtol=1e-4, atol=1e-7)
  assert rows[-1]["eval/reward_mean"] == sampler_rows[-1]["eval/reward_mean"]


def test_truncated_sampling_and_length_buckets_end_to_end(tmp_path):
  """top_p = 0.9, top_k = 5: the trainer's recompute (diagnostics steps) matches the sampler's
  log-probs. rollout.length_buckets: prompts padded to 32 and completions up to 16 tokens are cut to
  the bucket of the batch's longest; the run logs the same numbers as a run without them and with
  rollout.compact_every = 4 (compaction changes no sample), and the log-prob pass compiles at most
  one shape per (prompt, completion) bucket pair."""
  from maxnorm_jax.train import step as step_lib

  def run(buckets: bool, name: str):
    c = runlocal_config(
      "grpo",
      rollout={
        "top_p": 0.9,
        "top_k": 5,
        "max_new_tokens": 16,
        "length_buckets": buckets,
        "compact_every": 0 if buckets else 4,
      },
      data={"max_prompt_len": 32},
      eval={"every": 0},
      checkpoint={"every": 0},
    )
    return train(c, str(tmp_path / name))

  compiled = step_lib.sequence_logprobs._cache_size()
  trimmed = run(True, "buckets")
  compiled = step_lib.sequence_logprobs._cache_size() - compiled
  full = run(False, "full")
  assert 1 <= compiled <= 4 * 4  # pad_widths(32) x pad_widths(16): (8, 16, 32) x (8, 16)
  assert trimmed[1]["logp_mismatch_max"] < 1e-5 and full[1]["logp_mismatch_max"] < 1e-5  # diagnostics_every = 2
  for k in ("loss", "grad_norm", "kl_mean", "entropy", "reward_mean", "response_len_mean", "logp_mismatch_mean"):
    values = [[r[k] for r in rows if k in r] for rows in (trimmed, full)]
    np.testing.assert_allclose(*values, rtol=1e-4, atol=1e-6, err_msg=k)
