"""The lab's main job: Table 3 on the bandit, the two learning claims, the arcsine check.

from maxnorm_jax.lab import run
result = run.run("runs/default")   # prints the tables, writes PNGs and summary.json there
"""

import dataclasses
import json
import time
from typing import Callable

import numpy as np

from maxnorm_jax.lab import arcsine, methods, plots, simulate, table
from maxnorm_jax.lab import bandit as bandit_lib

ARCSINE_GROUP_SIZES = (8, 32, 128, 512)
TRANSFORM_PS = (0.1, 0.25, 0.5, 0.75, 0.9)


@dataclasses.dataclass
class LabResult:
  """Everything the lab computed; `files` are the PNG and JSON paths it wrote."""

  rows: list
  traces: dict
  kind: np.ndarray
  kl_start: np.ndarray
  claims: dict
  arcsine_errors: dict
  transforms: dict
  files: list
  seconds: float


def learning_claims(traces: dict, bandit: bandit_lib.Bandit) -> dict:
  """The two claims of the issue, as numbers.

  jitter: KL growth on jitter prompts of GRPO without and with the Protocol, at the last step.
  credible: best-answer probability on credible small gaps of MaxNorm-RLOO and RLOO, both with
    the Protocol and the same beta, before the first step, at half the run and at its end.
  """
  kind = np.asarray(bandit.kind)
  kl_start = np.asarray(bandit_lib.kl_to_ref(bandit.init_logits, bandit.ref_logits))
  best_start = np.asarray(bandit_lib.best_arm_prob(bandit.init_logits, bandit.mean_reward))

  def grow(label):
    return table.jitter_kl_growth(traces[label], kind, kl_start)

  def best(label):
    return table.credible_best_prob(traces[label], kind)

  steps = len(best(methods.RLOO_P.label))
  return {
    "jitter_kl_growth_grpo": float(grow(methods.GRPO.label)[-1]),
    "jitter_kl_growth_grpo_protocol": float(grow(methods.GRPO_P.label)[-1]),
    "credible_best_prob_start": float(table.kind_mean(best_start, kind, bandit_lib.CREDIBLE)),
    "credible_best_prob_maxnorm_rloo": float(best(methods.MAXNORM_RLOO.label)[-1]),
    "credible_best_prob_rloo": float(best(methods.RLOO_P.label)[-1]),
    "credible_best_prob_maxnorm_rloo_half": float(best(methods.MAXNORM_RLOO.label)[steps // 2 - 1]),
    "credible_best_prob_rloo_half": float(best(methods.RLOO_P.label)[steps // 2 - 1]),
    "steps": steps,
  }


def _arcsine_text(errors: dict, transforms: dict) -> str:
  lines = ["Arcsine check (seed 004): GRPO (population std), max_p |w_G(p) sqrt(p(1-p)) - 1|, p in [0.1, 0.9]"]
  lines.append("  " + "  ".join(f"G={g}: {e:.4f}" for g, e in errors.items()))
  lines.append(f"Implied transforms: variance coefficient p(1-p) f'(p)^2 (1/pi^2 = {1 / np.pi**2:.4f})")
  lines.append("  " + "estimator".ljust(22) + "".join(f"p={p:<7g}" for p in TRANSFORM_PS) + "sup[.05,.95]")
  for name, r in transforms.items():
    idx = [int(np.argmin(np.abs(r["p"] - p))) for p in TRANSFORM_PS]
    inner = (r["p"] >= 0.05) & (r["p"] <= 0.95)
    lines.append(
      "  " + name.ljust(22) + "".join(f"{r['variance'][i]:<9.4f}" for i in idx) + f"{np.max(r['variance'][inner]):.4f}"
    )
  return "\n".join(lines)


def run(
  workdir: str,
  sim_cfg: simulate.SimConfig = simulate.SimConfig(),
  bandit_cfg: bandit_lib.BanditConfig = bandit_lib.BanditConfig(),
  rows: tuple = methods.TABLE_ROWS,
  print_fn: Callable[[str], None] = print,
) -> LabResult:
  """Runs the whole lab, prints its tables and writes its figures into `workdir`."""
  start = time.time()
  bandit = bandit_lib.make_bandit(bandit_cfg)
  kind = np.asarray(bandit.kind)
  kl_start = np.asarray(bandit_lib.kl_to_ref(bandit.init_logits, bandit.ref_logits))
  traces = simulate.simulate(rows, sim_cfg, bandit_cfg)
  table_rows = [table.make_row(m.label, traces[m.label], sim_cfg.beta, kind, kl_start) for m in rows]
  claims = learning_claims(traces, bandit)

  errors = arcsine.arcsine_errors(ARCSINE_GROUP_SIZES)
  transforms = arcsine.transforms()

  files = []

  def out(name):
    return plots.output_path(workdir, name)

  files.append(
    plots.curves(
      {m.label: table.jitter_kl_growth(traces[m.label], kind, kl_start) for m in rows},
      "Jitter prompts: KL to the reference, growth since the start",
      "KL(pi || ref) - KL at start",
      out("jitter_kl.png"),
      highlight=(methods.GRPO.label, methods.GRPO_P.label),
    )
  )
  files.append(
    plots.curves(
      {m.label: table.credible_best_prob(traces[m.label], kind) for m in rows},
      f"Credible small gaps: probability of the best answer (beta={sim_cfg.beta})",
      "P(best answer)",
      out("credible_gaps.png"),
      highlight=(methods.MAXNORM_RLOO.label, methods.RLOO_P.label),
    )
  )
  files.append(
    plots.curves(
      {m.label: table.kind_mean(traces[m.label].reward, kind, bandit_lib.BINARY) for m in rows},
      "Binary prompts: expected reward",
      "E[r]",
      out("binary_reward.png"),
    )
  )
  ps = np.linspace(0.02, 0.98, 97)
  files.append(
    plots.arcsine_limit(
      ps,
      {g: arcsine.expected_weight("grpo", ps, g, std_ddof=0) for g in (4, 16, 64, 256)},
      arcsine.arcsine_weight(ps),
      out("arcsine_limit.png"),
    )
  )
  files.append(plots.transforms(transforms, out("implied_transforms.png")))

  summary = {
    "sim_config": dataclasses.asdict(sim_cfg),
    "bandit_config": dataclasses.asdict(bandit_cfg),
    "table3": [dataclasses.asdict(r) for r in table_rows],
    "claims": claims,
    "arcsine_errors": {str(g): e for g, e in errors.items()},
    "variance_coefficient": {
      name: {f"{p:g}": float(r["variance"][int(np.argmin(np.abs(r["p"] - p)))]) for p in TRANSFORM_PS}
      for name, r in transforms.items()
    },
  }
  with open(out("summary.json"), "w") as f:
    json.dump(summary, f, indent=1, default=float)
  files.append(out("summary.json"))

  print_fn(
    f"Table 3 (seed 000) on the bandit: {bandit_cfg.prompts} prompts "
    f"({bandit_cfg.n_jitter} jitter, {bandit_cfg.n_credible} credible, {bandit_cfg.n_binary} binary), "
    f"K={bandit_cfg.arms}, G={sim_cfg.group_size}, {sim_cfg.steps} steps, beta={sim_cfg.beta}, "
    f"lr={sim_cfg.lr}; diagnostics on updated groups with std < 1e-2"
  )
  print_fn(table.format_table(table_rows))
  print_fn(
    "Claims: jitter KL growth GRPO {jitter_kl_growth_grpo:.3f} vs GRPO+Protocol "
    "{jitter_kl_growth_grpo_protocol:.3f}; credible P(best) at step {steps}: MaxNorm-RLOO "
    "{credible_best_prob_maxnorm_rloo:.3f} vs RLOO+Protocol {credible_best_prob_rloo:.3f} "
    "(start {credible_best_prob_start:.3f})".format(
      **{k: (0.0 if isinstance(v, float) and abs(v) < 5e-4 else v) for k, v in claims.items()}
    )
  )
  print_fn(_arcsine_text(errors, transforms))
  print_fn("Wrote " + ", ".join(files))
  return LabResult(table_rows, traces, kind, kl_start, claims, errors, transforms, files, time.time() - start)
