"""The bandit's prompts and the learning claims of seed 000."""

import jax
import numpy as np
import pytest

from maxnorm_jax.core import groups
from maxnorm_jax.lab import bandit as bandit_lib
from maxnorm_jax.lab import methods, run, simulate

CFG = bandit_lib.BanditConfig()


def test_prompt_kinds_have_the_promised_rewards():
  b = bandit_lib.make_bandit(CFG)
  mean = np.asarray(b.mean_reward)
  kind = np.asarray(b.kind)
  jitter, credible, binary = (mean[kind == k] for k in range(3))

  def span(x):
    return x.max(-1) - x.min(-1)

  assert np.all(span(jitter) < 0.5e-2)  # far below delta_res = 1e-2 (noise sd 1e-4 on top)
  assert np.all(span(credible) > 1.1e-2)  # credible gaps above delta_res ...
  assert np.all(span(credible) / 2 < 1e-2)  # ... yet any group's std (at most gap/2) < 1e-2
  assert set(np.unique(binary)) == {0.0, 1.0}
  assert np.all((binary.max(-1) == 1) & (binary.min(-1) == 0))


def test_sample_shapes_and_noise():
  b = bandit_lib.make_bandit(CFG)
  actions, rewards = bandit_lib.sample(b, b.ref_logits, jax.random.key(1), 8)
  assert actions.shape == rewards.shape == (CFG.prompts, 8)
  kind = np.asarray(b.kind)
  mean = np.take_along_axis(np.asarray(b.mean_reward), np.asarray(actions), -1)
  noise = np.asarray(rewards) - mean
  assert np.all(noise[kind == bandit_lib.BINARY] == 0)
  assert 0.3e-4 < noise[kind == bandit_lib.JITTER].std() < 3e-4
  std = np.asarray(groups.std(rewards, np.ones(rewards.shape, bool), ddof=0))
  assert np.all(std[kind != bandit_lib.BINARY] < 1e-2)


def test_exact_kl_and_best_prob():
  logits = np.log(np.array([[0.5, 0.25, 0.25]], np.float32))
  ref = np.zeros((1, 3), np.float32)
  kl = float(bandit_lib.kl_to_ref(logits, ref)[0])
  assert abs(kl - (0.5 * np.log(1.5) + 0.5 * np.log(0.75))) < 1e-6
  best = float(bandit_lib.best_arm_prob(logits, np.array([[0.0, 1.0, 1.0]], np.float32))[0])
  assert abs(best - 0.5) < 1e-6


def test_grpo_drifts_on_jitter_without_the_protocol(lab_result):
  c = lab_result.claims
  assert c["jitter_kl_growth_grpo"] > 0.3  # KL to the reference grows by more than 0.3 nats
  assert abs(c["jitter_kl_growth_grpo_protocol"]) < 1e-6  # the gate leaves jitter prompts alone


def test_protocol_gates_every_jitter_group(lab_result):
  kind = lab_result.kind
  gated = lab_result.traces[methods.GRPO_P.label].valid[:, kind == bandit_lib.JITTER]
  assert not gated.any()
  ungated = lab_result.traces[methods.GRPO.label].valid[:, kind == bandit_lib.JITTER]
  assert ungated.mean() > 0.9


def test_maxnorm_learns_credible_gaps_faster_than_rloo_at_the_same_beta(lab_result):
  c = lab_result.claims
  assert c["steps"] == 150
  # RLOO's O(gap) push is KL dominated: it barely leaves its start.
  assert c["credible_best_prob_rloo"] < c["credible_best_prob_start"] + 0.05
  assert c["credible_best_prob_maxnorm_rloo_half"] - c["credible_best_prob_rloo_half"] > 0.2
  assert c["credible_best_prob_maxnorm_rloo"] - c["credible_best_prob_rloo"] > 0.4


def test_binning_without_the_gate_matches_the_full_protocol(lab_result):
  rows = {r.label: r for r in lab_result.rows}
  binned, full = rows[methods.MAXNORM_RLOO_BIN.label], rows[methods.MAXNORM_RLOO.label]
  assert abs(binned.jitter_kl_growth) < 1e-6  # jitter groups bin to one value: zero-group skip
  assert abs(binned.credible_best_prob - full.credible_best_prob) < 0.03


@pytest.mark.parametrize("seed", [1, 2])
def test_claims_hold_for_other_seeds(seed):
  # Same shapes as the session's run, so the compiled simulation is reused.
  sim_cfg = simulate.SimConfig(seed=seed)
  bandit_cfg = bandit_lib.BanditConfig(seed=seed)
  b = bandit_lib.make_bandit(bandit_cfg)
  traces = simulate.simulate(methods.TABLE_ROWS, sim_cfg, bandit_cfg)
  c = run.learning_claims(traces, b)
  assert c["jitter_kl_growth_grpo"] > 0.3
  assert abs(c["jitter_kl_growth_grpo_protocol"]) < 1e-6
  assert c["credible_best_prob_maxnorm_rloo"] - c["credible_best_prob_rloo"] > 0.4
