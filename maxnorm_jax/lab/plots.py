"""PNG figures of the lab (matplotlib, Agg backend). Drawing only: the numbers come in ready."""

import os

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402  (after the backend is chosen)
import numpy as np  # noqa: E402


def _save(fig, path: str) -> str:
  fig.tight_layout()
  fig.savefig(path, dpi=110)
  plt.close(fig)
  return path


def _colors(ax, n: int):
  ax.set_prop_cycle(color=plt.get_cmap("tab20")(np.linspace(0, 1, max(n, 2))))


def curves(series: dict[str, np.ndarray], title: str, ylabel: str, path: str, highlight=()) -> str:
  """Line plot of {label: [S] values} against the step; `highlight` labels drawn thicker."""
  fig, ax = plt.subplots(figsize=(7.5, 4.5))
  _colors(ax, len(series))
  for label, y in series.items():
    wide = label in highlight
    ax.plot(
      np.arange(1, len(y) + 1), y, label=label, lw=2.4 if wide else 1.0, alpha=1.0 if wide or not highlight else 0.55
    )
  ax.set_xlabel("step")
  ax.set_ylabel(ylabel)
  ax.set_title(title)
  ax.grid(alpha=0.3)
  ax.legend(fontsize=7, ncol=2)
  return _save(fig, path)


def arcsine_limit(p: np.ndarray, weights: dict[int, np.ndarray], limit: np.ndarray, path: str) -> str:
  """GRPO's expected update weight w_G(p) for several G against 1/sqrt(p(1-p))."""
  fig, ax = plt.subplots(figsize=(6.5, 4.5))
  for g, w in sorted(weights.items()):
    ax.plot(p, w, lw=1.2, label=f"GRPO, G={g}")
  ax.plot(p, limit, "k--", lw=2, label=r"$\pi \, d/dp\, (2/\pi)\arcsin\sqrt{p}$")
  ax.set_xlabel("p (success probability)")
  ax.set_ylabel("expected update / grad p")
  ax.set_title("Seed 004: GRPO's expected update approaches the arcsine gradient")
  ax.set_ylim(0, min(8.0, float(np.max(limit)) * 1.1))
  ax.grid(alpha=0.3)
  ax.legend(fontsize=8)
  return _save(fig, path)


def transforms(results: dict[str, dict[str, np.ndarray]], path: str) -> str:
  """Implied transforms f(p) and their variance coefficients p(1-p) f'(p)^2, one curve each."""
  fig, (ax_f, ax_v) = plt.subplots(1, 2, figsize=(12, 4.5))
  _colors(ax_f, len(results))
  _colors(ax_v, len(results))
  for name, r in results.items():
    ax_f.plot(np.r_[0.0, r["p"], 1.0], np.r_[0.0, r["f"], 1.0], lw=1.2, label=name)
    ax_v.plot(r["p"], r["variance"], lw=1.2, label=name)
  ax_v.axhline(1 / np.pi**2, color="k", ls="--", lw=1.5, label=r"$1/\pi^2$")
  ax_f.set_title("implied transform f(p)")
  ax_v.set_title(r"variance coefficient $p(1-p)f'(p)^2$")
  ax_v.set_ylim(0, 0.6)
  for ax in (ax_f, ax_v):
    ax.set_xlabel("p")
    ax.grid(alpha=0.3)
  ax_v.legend(fontsize=7, ncol=2)
  return _save(fig, path)


def output_path(workdir: str, name: str) -> str:
  os.makedirs(workdir, exist_ok=True)
  return os.path.join(workdir, name)
