"""A small synthetic run directory in the trainer's workdir format, for tests of its readers.

`write_synthetic_run(workdir)` writes:

* ``metrics.jsonl``: a step-0 line with only eval/ keys; steps 1..6 with every always-present
  metric; diagnostics (``r_over_kl``, ``dir_cardinal``, ``cos_reward_neg_kl``) on even steps; eval
  on steps 3 and 6; ``kl_p95`` null on step 2; step 4 written twice (a resumed run), the second line
  (``reward_mean`` = ``RESUMED_REWARD``) being the one that counts.
* ``cards/step_000003.npz`` and ``cards/step_000006.npz`` with P = G = 4.
* ``config.json`` with ``method``, ``advantage.estimator`` and ``protocol.delta_res``.
"""

import json
import os

import numpy as np

METHOD = "maxnorm_rloo"
ESTIMATOR = "maxnorm_rloo"
DELTA_RES = 0.1
STEPS = (1, 2, 3, 4, 5, 6)
CARD_STEPS = (3, 6)
P, G = 4, 4
RESUMED_STEP = 4
RESUMED_REWARD = 0.875
T0 = 1_700_000_000.0

ALWAYS = (
  "reward_mean",
  "kl_mean",
  "kl_p95",
  "acr",
  "zero_group_frac",
  "subres_frac",
  "inv_scale_p50",
  "inv_scale_p95",
  "inv_scale_p99",
  "scale_p50",
  "scale_p95",
  "scale_p99",
  "clip_frac",
  "entropy",
  "response_len_mean",
  "grad_norm",
  "time/generate",
  "time/verify",
  "time/logprobs",
  "time/update",
  "time/step",
)
DIAGNOSTICS = ("r_over_kl", "dir_cardinal", "cos_reward_neg_kl")
EVALS = ("eval/reward_mean", "eval/pass@1", "eval/avg@k")


def reward_mean(step):
  """The reward_mean written for a step (before the resumed line of RESUMED_STEP)."""
  return 0.1 * step


def _train_line(step, reward):
  line = {"step": step, "time": T0 + 10.0 * step}
  for i, name in enumerate(ALWAYS):
    line[name] = float(0.01 * (i + 1) * step)
  line["reward_mean"] = reward
  line["kl_mean"] = 0.001 * step
  line["kl_p95"] = None if step == 2 else 0.003 * step
  line["inv_scale_p95"] = 2.0 * step
  line["inv_scale_p99"] = 10.0 * step
  if step % 2 == 0:
    line.update({"r_over_kl": 5.0 * step, "dir_cardinal": 0.5, "cos_reward_neg_kl": -0.1})
  if step in (3, 6):
    line.update({"eval/reward_mean": 0.05 * step, "eval/pass@1": 0.04 * step, "eval/avg@k": 0.045 * step})
  return line


def synthetic_card(step, seed):
  """A card [P, G] of one step; group 0 all-equal (invalid), the last group half masked."""
  rng = np.random.default_rng(seed)
  rewards = rng.integers(0, 2, size=(P, G)).astype(np.float32)
  rewards[0] = 1.0
  rewards[1] = np.array([0.0, 1.0, 0.0, 1.0], np.float32)
  mask = np.ones((P, G), bool)
  mask[P - 1, G // 2 :] = False
  protocol_rewards = np.round(rewards / DELTA_RES) * DELTA_RES
  valid = np.array([np.ptp(r[m]) > 0 for r, m in zip(protocol_rewards, mask)])
  numerator = np.zeros((P, G), np.float32)
  scale = np.ones((P,), np.float32)
  for p in range(P):
    r = protocol_rewards[p][mask[p]]
    n = len(r)
    loo = (r.sum() - r) / max(n - 1, 1)
    numerator[p, mask[p]] = r - loo
    scale[p] = max(float(np.abs(numerator[p]).max()), DELTA_RES)
  advantages = np.where(mask & valid[:, None], numerator / scale[:, None], 0.0)
  kl_weight = np.where(valid, 1.0 / scale, 0.0)
  return dict(
    rewards=rewards,
    protocol_rewards=protocol_rewards.astype(np.float32),
    mask=mask,
    numerator=numerator,
    scale=scale,
    advantages=advantages.astype(np.float32),
    kl_weight=kl_weight.astype(np.float32),
    valid=valid,
  )


def write_synthetic_run(workdir, method=METHOD):
  """Writes the synthetic run into ``workdir`` (created if needed) and returns ``workdir``."""
  workdir = os.fspath(workdir)
  os.makedirs(os.path.join(workdir, "cards"), exist_ok=True)
  lines = [{"step": 0, "time": T0, "eval/reward_mean": 0.0, "eval/pass@1": 0.0, "eval/avg@k": 0.0}]
  for step in STEPS:
    lines.append(_train_line(step, reward_mean(step)))
    if step == 5:  # the run resumes from step 4's checkpoint and writes step 4 again
      lines.append(_train_line(RESUMED_STEP, RESUMED_REWARD))
  with open(os.path.join(workdir, "metrics.jsonl"), "w", encoding="utf-8") as f:
    for line in lines:
      f.write(json.dumps(line) + "\n")
  for step in CARD_STEPS:
    np.savez(os.path.join(workdir, "cards", f"step_{step:06d}.npz"), **synthetic_card(step, seed=step))
  config = {
    "method": method,
    "advantage": {"estimator": ESTIMATOR, "params": {"tau_res": DELTA_RES}},
    "protocol": {"delta_res": DELTA_RES, "gate": True, "binning": True},
  }
  with open(os.path.join(workdir, "config.json"), "w", encoding="utf-8") as f:
    json.dump(config, f, indent=2)
  return workdir


# ---- sweep cells with known values (tests of maxnorm_jax.analysis) ----

SWEEP_STEPS = 10  # the last 20% of the RL steps are steps 9 and 10
SWEEP_EVAL_STEPS = (0, 5, 10)


def write_sweep_cell(root, method, seed, acc, best_acc, kl_p95, early_kl_p95=99.0, protocol=None, steps=SWEEP_STEPS):
  """Writes `root/<method>/seed<seed>/` and returns its path.

  eval/reward_mean is 0.1 at step 0, `best_acc` at step 5 and `acc` at step 10 (eval/pass@1 half
  of it, eval/reward_mean_n = 128); `kl_p95` is `early_kl_p95` on steps 1..8 and `kl_p95` on steps
  9..10; `r_over_kl` is logged on even steps only (2 * kl_p95 in the tail). A run written with
  `steps` < SWEEP_STEPS stops early (its config still plans SWEEP_STEPS).
  """
  workdir = os.path.join(os.fspath(root), method, f"seed{seed}")
  os.makedirs(workdir, exist_ok=True)
  evals = {0: 0.1, 5: best_acc, 10: acc}
  lines = []
  for step in range(0, steps + 1):
    line = {"step": step, "time": T0 + step}
    if step > 0:
      tail = step > SWEEP_STEPS - 2
      line.update(kl_p95=kl_p95 if tail else early_kl_p95, acr=0.25, subres_frac=None if step == 9 else 0.5)
      line["time/step"] = 1.0
      if step % 2 == 0:
        line["r_over_kl"] = 2.0 * line["kl_p95"]
    if step in evals:
      line.update({"eval/reward_mean": evals[step], "eval/pass@1": evals[step] / 2, "eval/reward_mean_n": 128})
    lines.append(line)
  with open(os.path.join(workdir, "metrics.jsonl"), "w", encoding="utf-8") as f:
    for line in lines:
      f.write(json.dumps(line) + "\n")
  protocol = protocol or {"gate": True, "binning": False, "zero_group": "skip", "delta_res": 0.01}
  config = {
    "method": method,
    "seed": seed,
    "task": "arith_mix",
    "model": {"preset": "tiny"},
    "train": {"steps": SWEEP_STEPS},
    "advantage": {"estimator": method, "params": {}},
    "protocol": protocol,
  }
  with open(os.path.join(workdir, "config.json"), "w", encoding="utf-8") as f:
    json.dump(config, f, indent=2)
  return workdir
