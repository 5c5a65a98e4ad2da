"""Seed 000's Table 3 and the lab's claims, computed from simulation traces (pure NumPy).

Columns per method row (one run of S steps on the bandit):
  mean KL, KL P95: mean and 95th percentile over prompts of the exact KL(pi || pi_ref) after the
    last step.
  Inv P95 / P99:   percentiles of 1/s_q over the updated low-variance groups of every step.
  R/KL:            sum_t ||g_R|| / (beta sum_t ||g_KL||) over the steps, on low-variance groups.
  Dir:             mean over steps of cos(g_R, g_R with s_q = 1), on low-variance groups.
  cos(R,-KL):      mean over steps of cos(g_R, -g_KL), on low-variance groups.
  max|c|:          the largest |advantage| on a low-variance group in the run.
  jitter dKL:      growth of the mean KL on jitter prompts over the run.
  cred. p*:        probability of the best answer on credible small-gap prompts at the end.
Low-variance groups: updated (valid) groups whose reward std (ddof 0) is below 1e-2.
Dir compares with the card's own numerator u at s_q = 1 (`diagnostics.cardinal_card`); for
REINFORCE++ (no group baseline) u is the raw reward, so its Dir measures the batch whitening's
shift of low-variance groups against their uncentred rewards.
"""

import dataclasses

import numpy as np

from maxnorm_jax.lab import bandit as bandit_lib
from maxnorm_jax.lab.simulate import Trace


@dataclasses.dataclass(frozen=True)
class Row:
  """One Table 3 row (floats; NaN where a column is undefined for the run)."""

  label: str
  mean_kl: float
  kl_p95: float
  inv_p95: float
  inv_p99: float
  r_over_kl: float
  dir_cardinal: float
  cos_reward_neg_kl: float
  max_abs_c: float
  jitter_kl_growth: float
  credible_best_prob: float


COLUMNS = (
  ("mean KL", "mean_kl", "{:.3f}"),
  ("KL P95", "kl_p95", "{:.3f}"),
  ("Inv P95/P99", None, None),
  ("R/KL", "r_over_kl", "{:.2f}"),
  ("Dir", "dir_cardinal", "{:.3f}"),
  ("cos(R,-KL)", "cos_reward_neg_kl", "{:.2f}"),
  ("max|c|", "max_abs_c", "{:.2f}"),
  ("jitter dKL", "jitter_kl_growth", "{:.3f}"),
  ("cred. p*", "credible_best_prob", "{:.3f}"),
)


def kind_mean(x: np.ndarray, kind: np.ndarray, which: int) -> np.ndarray:
  """Mean over the prompts of one kind: x [..., P] -> [...]."""
  return np.asarray(x)[..., np.asarray(kind) == which].mean(axis=-1)


def jitter_kl_growth(trace: Trace, kind: np.ndarray, kl_start: np.ndarray) -> np.ndarray:
  """[S] mean KL to the reference on jitter prompts, minus its value before the first step."""
  return kind_mean(trace.kl, kind, bandit_lib.JITTER) - kind_mean(kl_start, kind, bandit_lib.JITTER)


def credible_best_prob(trace: Trace, kind: np.ndarray) -> np.ndarray:
  """[S] mean probability of the best answer on credible small-gap prompts."""
  return kind_mean(trace.best_prob, kind, bandit_lib.CREDIBLE)


def _percentile(x, q):
  return float(np.percentile(x, q)) if np.size(x) else float("nan")


def _nanmean(x):
  x = np.asarray(x, np.float64)
  return float(np.mean(x[np.isfinite(x)])) if np.any(np.isfinite(x)) else float("nan")


def make_row(label: str, trace: Trace, beta: float, kind: np.ndarray, kl_start: np.ndarray) -> Row:
  """The Table 3 row of one run (see the module docstring for each column)."""
  lv = np.asarray(trace.low_var, bool)
  inv = np.asarray(trace.inv_scale)[lv]
  kl_norm = float(np.sum(trace.grad_norm_kl))
  return Row(
    label=label,
    mean_kl=float(np.mean(trace.kl[-1])),
    kl_p95=_percentile(trace.kl[-1], 95),
    inv_p95=_percentile(inv, 95),
    inv_p99=_percentile(inv, 99),
    r_over_kl=float(np.sum(trace.grad_norm_reward)) / (beta * kl_norm) if kl_norm > 0 else float("nan"),
    dir_cardinal=_nanmean(trace.dir_cardinal),
    cos_reward_neg_kl=_nanmean(trace.cos_reward_neg_kl),
    max_abs_c=float(np.max(trace.max_abs_c)),
    jitter_kl_growth=float(jitter_kl_growth(trace, kind, kl_start)[-1]),
    credible_best_prob=float(credible_best_prob(trace, kind)[-1]),
  )


def _fmt_inv(x: float) -> str:
  return "nan" if not np.isfinite(x) else (f"{x:.0f}" if x >= 10 else f"{x:.1f}")


def format_table(rows: list[Row]) -> str:
  """The rows as an aligned text table (Markdown pipe syntax)."""
  header = ["Method"] + [c[0] for c in COLUMNS]
  lines = []
  for row in rows:
    cells = [row.label]
    for title, attr, fmt in COLUMNS:
      if attr is None:
        cells.append(f"{_fmt_inv(row.inv_p95)}/{_fmt_inv(row.inv_p99)}")
      else:
        value = getattr(row, attr)
        cells.append(fmt.format(0.0 if abs(value) < 5e-4 else value))
    lines.append(cells)
  widths = [max(len(r[i]) for r in [header] + lines) for i in range(len(header))]

  def render(cells):
    return "| " + " | ".join(c.ljust(w) for c, w in zip(cells, widths)) + " |"

  rule = "|" + "|".join("-" * (w + 2) for w in widths) + "|"
  return "\n".join([render(header), rule] + [render(c) for c in lines])
