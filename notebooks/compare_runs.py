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
# # Compare runs
#
# Seed 000's three tables and per-method curves with seed bands for a sweep root laid out as
# `ROOT/<method>/seed<s>/` (what `launch/sweep.py` writes). Set `MAXNORM_WORKDIR` to the sweep
# root (or edit the parameter cell). All numbers come from `maxnorm_jax.analysis`, the same code
# as `python -m maxnorm_jax.analysis`; this notebook only prints and plots.
#
# Paired with `compare_runs.ipynb` by jupytext: edit this `.py`, then
# `jupytext --to ipynb notebooks/compare_runs.py`.

# %%
# %matplotlib inline
import os

import matplotlib.pyplot as plt

from maxnorm_jax import analysis

# %% tags=["parameters"]
ROOT = os.environ.get("MAXNORM_WORKDIR", "runs/sweep")
INCLUDE_INCOMPLETE = False

# %%
runs = analysis.load_runs(ROOT, include_incomplete=INCLUDE_INCOMPLETE)
counts = runs.groupby("method")["seed"].count()
print(f"root: {ROOT}")
print(f"runs: {len(runs)} in {runs['unit'].nunique()} unit(s); seeds per method: {dict(counts)}")

# %% [markdown]
# ## Tables (seed 000's layouts)

# %%
for table in (analysis.table1(runs), analysis.table2(runs), analysis.table3(runs)):
  print(analysis.render(table, "md"))

# %%
reference = "maxnorm_rloo" if "maxnorm_rloo" in set(runs["method"]) else runs["method"].iloc[0]
print(analysis.render(analysis.paired_table(runs, reference), "md"))

# %% [markdown]
# ## Curves: mean over seeds, band = ± one std over seeds


# %%
def plot_bands(ax, metric, log=False):
  for method, (steps, mean, std) in analysis.method_bands(runs, metric).items():
    (line,) = ax.plot(steps, mean, label=method)
    ax.fill_between(steps, mean - std, mean + std, color=line.get_color(), alpha=0.2)
  ax.set_title(metric)
  ax.set_xlabel("step")
  if log:
    ax.set_yscale("log")


inv_tail = "lowvar_inv_scale_p99" if "lowvar_inv_scale_p99" in runs else "inv_scale_p99"
fig, axes = plt.subplots(2, 2, figsize=(12, 8), constrained_layout=True)
plot_bands(axes[0, 0], analysis.ACC)
plot_bands(axes[0, 1], "kl_mean")
plot_bands(axes[1, 0], "acr")
plot_bands(axes[1, 1], inv_tail, log=True)
axes[0, 0].legend(fontsize=7)
plt.show()
