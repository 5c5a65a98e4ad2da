# ---
# jupyter:
#   jupytext:
#     formats: ipynb,py:percent
#     text_representation:
#       extension: .py
#       format_name: percent
#       format_version: '1.3'
#       jupytext_version: 1.19.6
#   kernelspec:
#     display_name: Python 3 (ipykernel)
#     language: python
#     name: python3
# ---

# %% [markdown]
# # Inspect a run
#
# Training curves, evaluation and the latest advantage card of one trainer run directory.
# Set `MAXNORM_WORKDIR` (or edit the parameter cell) to point at the run. All loading goes
# through `maxnorm_jax.train.run_data`; this notebook only plots.
#
# Paired with `inspect_run.ipynb` by jupytext: edit this `.py`, then
# `jupytext --to ipynb notebooks/inspect_run.py`.

# %%
# %matplotlib inline
import os

import matplotlib.pyplot as plt
import numpy as np

from maxnorm_jax.train import run_data

# %% tags=["parameters"]
WORKDIR = os.environ.get("MAXNORM_WORKDIR", "runs/default")

# %%
config = run_data.load_config(WORKDIR)
metrics = run_data.load_metrics(WORKDIR)
print(f"workdir:   {WORKDIR}")
print(f"method:    {config.get('method')}")
print(f"estimator: {run_data.config_value(config, 'advantage.estimator')}")
print(f"delta_res: {run_data.config_value(config, 'protocol.delta_res')}")
print(f"steps:     {metrics['step'][-1] if len(metrics['step']) else 'none'}")

# %% [markdown]
# ## Training curves


# %%
def plot_metric(ax, name, **kwargs):
  steps, values = run_data.metric_series(metrics, name)
  ax.plot(steps, values, label=name, **kwargs)


fig, axes = plt.subplots(2, 2, figsize=(11, 7), constrained_layout=True)
plot_metric(axes[0, 0], "reward_mean")
axes[0, 0].set_title("reward")
plot_metric(axes[0, 1], "kl_mean")
plot_metric(axes[0, 1], "kl_p95", linestyle="--")
axes[0, 1].set_title("KL")
plot_metric(axes[1, 0], "acr")
axes[1, 0].set_title("acr")
plot_metric(axes[1, 1], "inv_scale_p95")
plot_metric(axes[1, 1], "inv_scale_p99", linestyle="--")
axes[1, 1].set_yscale("log")
axes[1, 1].set_title("inverse-scale tail")
for ax in axes.flat:
  ax.set_xlabel("step")
  ax.legend()
plt.show()

# %% [markdown]
# ## Evaluation

# %%
eval_steps, eval_reward = run_data.metric_series(metrics, "eval/reward_mean")
if len(eval_steps):
  fig, ax = plt.subplots(figsize=(6, 3.5), constrained_layout=True)
  ax.plot(eval_steps, eval_reward, marker="o", label="eval/reward_mean")
  for name in ("eval/pass@1", "eval/avg@k"):
    plot_metric(ax, name, marker=".", linestyle=":")
  ax.set_xlabel("step")
  ax.set_title("evaluation")
  ax.legend()
  plt.show()
else:
  print("no eval/reward_mean in this run")

# %% [markdown]
# ## Latest card
#
# Per-group rewards against advantages (masked-out samples left out), coloured by whether the
# group is valid, and the groups' scale, KL weight and validity.

# %%
MAX_ROWS = 16
card_steps = run_data.card_steps(WORKDIR)
if card_steps:
  card = run_data.load_card(WORKDIR)
  P, G = card["rewards"].shape
  print(f"card of step {int(card['step'])}: P={P}, G={G} (cards at steps {card_steps})")
  mask = card["mask"]
  valid = np.broadcast_to(card["valid"][:, None], mask.shape)
  group = np.broadcast_to(np.arange(P)[:, None], mask.shape)
  fig, (ax0, ax1) = plt.subplots(1, 2, figsize=(11, 4), constrained_layout=True)
  for is_valid, colour in ((True, "tab:blue"), (False, "tab:red")):
    sel = mask & (valid == is_valid)
    label = "valid" if is_valid else "invalid"
    ax0.scatter(card["rewards"][sel], card["advantages"][sel], c=colour, alpha=0.6, label=label)
    ax1.scatter(group[sel], card["advantages"][sel], c=colour, alpha=0.6, marker="_", s=200, label=label)
  ax0.set_xlabel("reward")
  ax0.set_ylabel("advantage")
  ax0.set_title("rewards vs advantages")
  ax1.set_xlabel("group")
  ax1.set_ylabel("advantage")
  ax1.set_title("advantages per group")
  for ax in (ax0, ax1):
    ax.legend()
  plt.show()

  print(f"{'group':>5}  {'scale':>10}  {'kl_weight':>10}  {'valid':>5}")
  for p in range(min(P, MAX_ROWS)):
    print(f"{p:>5d}  {card['scale'][p]:>10.4g}  {card['kl_weight'][p]:>10.4g}  {str(bool(card['valid'][p])):>5}")
  if P > MAX_ROWS:
    print(f"... {P - MAX_ROWS} more groups")
else:
  print("no cards in this run")
