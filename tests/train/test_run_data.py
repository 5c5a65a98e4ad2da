"""train.run_data: the reader of a run directory, on a synthetic run (testing.fake_run)."""

import json
import math
import os

import numpy as np
import pytest

from maxnorm_jax.testing import fake_run
from maxnorm_jax.train import run_data


@pytest.fixture
def run(tmp_path):
  return fake_run.write_synthetic_run(tmp_path / "run")


def test_load_metrics_steps_sorted_and_last_line_wins(run):
  m = run_data.load_metrics(run)
  np.testing.assert_array_equal(m["step"], [0, 1, 2, 3, 4, 5, 6])
  assert m["step"].dtype == np.int64
  expected = [fake_run.reward_mean(s) for s in fake_run.STEPS]
  expected[fake_run.RESUMED_STEP - 1] = fake_run.RESUMED_REWARD
  np.testing.assert_allclose(m["reward_mean"][1:], expected)
  np.testing.assert_allclose(m["time"], fake_run.T0 + 10.0 * np.arange(7))
  for name in fake_run.ALWAYS + fake_run.DIAGNOSTICS + fake_run.EVALS:
    assert m[name].shape == (7,) and m[name].dtype == np.float64, name


def test_load_metrics_missing_and_null_are_nan(run):
  m = run_data.load_metrics(run)
  assert math.isnan(m["reward_mean"][0])  # the step-0 line holds only eval/ keys
  assert m["eval/reward_mean"][0] == 0.0
  assert math.isnan(m["kl_p95"][2])  # null on step 2
  np.testing.assert_allclose(m["kl_p95"][3], 0.009)
  assert np.isnan(m["r_over_kl"][[0, 1, 3, 5]]).all()
  np.testing.assert_allclose(m["r_over_kl"][[2, 4, 6]], [10.0, 20.0, 30.0])


def test_metric_series_drops_nan(run):
  m = run_data.load_metrics(run)
  steps, values = run_data.metric_series(m, "eval/reward_mean")
  np.testing.assert_array_equal(steps, [0, 3, 6])
  np.testing.assert_allclose(values, [0.0, 0.15, 0.3])
  steps, values = run_data.metric_series(m, "kl_p95")
  np.testing.assert_array_equal(steps, [1, 3, 4, 5, 6])
  steps, values = run_data.metric_series(m, "not_a_metric")
  assert steps.shape == values.shape == (0,)


@pytest.mark.parametrize(
  "bad, why",
  [
    ("{not json", "not valid JSON"),
    ("[1, 2]", "expected a JSON object"),
    ('{"time": 1.0, "reward_mean": 0.5}', "'step' must be an int"),
    ('{"step": "7", "reward_mean": 0.5}', "'step' must be an int"),
    ('{"step": 7, "reward_mean": "high"}', "non-numeric value"),
  ],
)
def test_malformed_line_names_file_and_line(run, bad, why):
  path = os.path.join(run, "metrics.jsonl")
  with open(path, encoding="utf-8") as f:
    n = len(f.readlines())
  with open(path, "a", encoding="utf-8") as f:
    f.write("\n" + bad + "\n")  # a blank line first: blank lines count but are skipped
  with pytest.raises(ValueError, match=why) as e:
    run_data.load_metrics(run)
  assert f"{path}:{n + 2}:" in str(e.value)


def test_missing_metrics_file(tmp_path):
  with pytest.raises(FileNotFoundError, match="metrics.jsonl"):
    run_data.load_metrics(tmp_path)


def test_card_steps_and_latest_card(run):
  assert run_data.card_steps(run) == list(fake_run.CARD_STEPS)
  card = run_data.load_card(run)
  assert int(card["step"]) == fake_run.CARD_STEPS[-1]
  P, G = fake_run.P, fake_run.G
  for key in ("rewards", "protocol_rewards", "mask", "numerator", "advantages"):
    assert card[key].shape == (P, G), key
  for key in ("scale", "kl_weight", "valid"):
    assert card[key].shape == (P,), key
  assert card["mask"].dtype == bool and card["valid"].dtype == bool
  assert card["rewards"].dtype == np.float32
  assert not card["valid"][0] and card["valid"][1]  # group 0 all-equal, group 1 mixed
  assert (card["advantages"][~card["mask"]] == 0).all()


def test_load_card_by_step(run):
  card = run_data.load_card(run, step=3)
  assert int(card["step"]) == 3
  np.testing.assert_array_equal(card["rewards"], fake_run.synthetic_card(3, seed=3)["rewards"])


def test_load_card_missing(run, tmp_path):
  with pytest.raises(FileNotFoundError) as e:
    run_data.load_card(run, step=5)
  assert os.path.join(run, "cards", "step_000005.npz") in str(e.value)
  with pytest.raises(FileNotFoundError, match="no cards"):
    run_data.load_card(tmp_path)
  assert run_data.card_steps(tmp_path) == []


def test_load_config(run, tmp_path):
  config = run_data.load_config(run)
  assert config["method"] == fake_run.METHOD
  assert run_data.config_value(config, "advantage.estimator") == fake_run.ESTIMATOR
  assert run_data.config_value(config, "protocol.delta_res") == fake_run.DELTA_RES
  assert run_data.config_value(config, "protocol.missing", "d") == "d"
  with pytest.raises(FileNotFoundError, match="config.json"):
    run_data.load_config(tmp_path)
  (tmp_path / "config.json").write_text(json.dumps([1]))
  with pytest.raises(ValueError, match="expected a JSON object"):
    run_data.load_config(tmp_path)
