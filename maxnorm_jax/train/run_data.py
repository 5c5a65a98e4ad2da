"""Readers of a trainer run directory (workdir), for notebooks and tests.

The run-directory contract:

* ``WORKDIR/metrics.jsonl``: one JSON object per line with an int ``"step"`` (1-based RL step;
  ``0`` only on a line holding the first evaluation), ``"time"`` (unix seconds) and float metrics
  (``null`` for NaN). When a step appears on more than one line (a resumed run), the last line wins
  as a whole.
* ``WORKDIR/cards/step_NNNNNN.npz`` (step zero-padded to 6 digits): ``rewards`` [P, G],
  ``protocol_rewards`` [P, G], ``mask`` [P, G] bool, ``numerator`` [P, G], ``scale`` [P],
  ``advantages`` [P, G], ``kl_weight`` [P], ``valid`` [P] bool.
* ``WORKDIR/config.json``: the run's config as nested dicts (at least ``method``,
  ``advantage.estimator``, ``protocol.delta_res``).

This module only needs NumPy and the standard library (no JAX), so a notebook can import it cheaply.
"""

import json
import math
import os
import re

import numpy as np

METRICS_FILE = "metrics.jsonl"
CARDS_DIR = "cards"
CONFIG_FILE = "config.json"
CARD_KEYS = (
  "rewards",
  "protocol_rewards",
  "mask",
  "numerator",
  "scale",
  "advantages",
  "kl_weight",
  "valid",
)
_CARD_RE = re.compile(r"^step_(\d{6,})\.npz$")


def _metric_value(value, path, lineno, name):
  """A metric value as a float: None -> NaN; numbers (and bools) -> float; anything else raises."""
  if value is None:
    return math.nan
  if isinstance(value, (bool, int, float)):
    return float(value)
  raise ValueError(f"{path}:{lineno}: metric {name!r} has a non-numeric value {value!r} (expected a number or null)")


def _read_metric_lines(path):
  """{step: {name: float}} from metrics.jsonl, the last line of each step winning."""
  by_step = {}
  with open(path, encoding="utf-8") as f:
    for lineno, line in enumerate(f, start=1):
      if not line.strip():
        continue
      try:
        record = json.loads(line)
      except json.JSONDecodeError as e:
        raise ValueError(f"{path}:{lineno}: not valid JSON ({e.msg})") from e
      if not isinstance(record, dict):
        raise ValueError(f"{path}:{lineno}: expected a JSON object, got {type(record).__name__}")
      step = record.get("step")
      if isinstance(step, bool) or not isinstance(step, int):
        if isinstance(step, float) and step.is_integer():
          step = int(step)
        else:
          raise ValueError(f"{path}:{lineno}: 'step' must be an int, got {step!r}")
      values = {}
      for name, value in record.items():
        if name == "step":
          continue
        values[name] = _metric_value(value, path, lineno, name)
      by_step[step] = values
  return by_step


def load_metrics(workdir):
  """All metrics of a run as arrays over its sorted steps.

  Args:
      workdir: the run directory holding ``metrics.jsonl``.

  Returns:
      dict with ``"step"``: int64 [T] (sorted, unique; the last line of a repeated step wins) and,
      for every name seen on any line (``"time"`` included), a float64 [T] array aligned with
      ``"step"``: NaN where the line of that step lacks the name or holds null.

  Raises:
      FileNotFoundError: no metrics.jsonl in ``workdir``.
      ValueError: a malformed line; the message starts with ``path:lineno``.
  """
  path = os.path.join(os.fspath(workdir), METRICS_FILE)
  if not os.path.exists(path):
    raise FileNotFoundError(f"no metrics file at {path}")
  by_step = _read_metric_lines(path)
  steps = sorted(by_step)
  names = []
  seen = set()
  for step in steps:
    for name in by_step[step]:
      if name not in seen:
        seen.add(name)
        names.append(name)
  out = {"step": np.asarray(steps, dtype=np.int64)}
  for name in names:
    out[name] = np.asarray([by_step[s].get(name, math.nan) for s in steps], dtype=np.float64)
  return out


def metric_series(metrics, name):
  """The (steps, values) of one metric, without its NaN entries.

  Args:
      metrics: a ``load_metrics`` result.
      name: a metric name, e.g. ``"reward_mean"`` or ``"eval/pass@1"``.

  Returns:
      (steps int64 [K], values float64 [K]), K <= T; both empty when the name is absent.
  """
  steps = np.asarray(metrics["step"])
  if name not in metrics:
    return steps[:0], np.zeros((0,), np.float64)
  values = np.asarray(metrics[name], dtype=np.float64)
  keep = ~np.isnan(values)
  return steps[keep], values[keep]


def card_steps(workdir):
  """The sorted steps that have a card in ``WORKDIR/cards`` ([] when there is none)."""
  cards = os.path.join(os.fspath(workdir), CARDS_DIR)
  if not os.path.isdir(cards):
    return []
  steps = []
  for name in os.listdir(cards):
    m = _CARD_RE.match(name)
    if m:
      steps.append(int(m.group(1)))
  return sorted(steps)


def card_path(workdir, step):
  """The path of the card of ``step``: ``WORKDIR/cards/step_{step:06d}.npz``."""
  return os.path.join(os.fspath(workdir), CARDS_DIR, f"step_{int(step):06d}.npz")


def load_card(workdir, step=None):
  """One step's card.

  Args:
      workdir: the run directory.
      step: the RL step; None for the latest card.

  Returns:
      dict of arrays: ``rewards``, ``protocol_rewards``, ``mask`` (bool), ``numerator``,
      ``advantages`` [P, G]; ``scale``, ``kl_weight``, ``valid`` (bool) [P]; plus ``"step"``,
      a 0-d int64 array holding the card's step.

  Raises:
      FileNotFoundError: naming the missing card (or the cards directory when it holds none).
  """
  if step is None:
    steps = card_steps(workdir)
    if not steps:
      raise FileNotFoundError(f"no cards (step_NNNNNN.npz) in {os.path.join(os.fspath(workdir), CARDS_DIR)}")
    step = steps[-1]
  path = card_path(workdir, step)
  if not os.path.exists(path):
    available = card_steps(workdir)
    raise FileNotFoundError(f"no card at {path} (cards for steps {available})")
  with np.load(path, allow_pickle=False) as data:
    card = {k: np.asarray(data[k]) for k in data.files}
  for k in ("mask", "valid"):
    if k in card:
      card[k] = card[k].astype(bool)
  card["step"] = np.asarray(int(step), dtype=np.int64)
  return card


def load_config(workdir):
  """The run's config (``WORKDIR/config.json``) as nested dicts."""
  path = os.path.join(os.fspath(workdir), CONFIG_FILE)
  if not os.path.exists(path):
    raise FileNotFoundError(f"no config at {path}")
  with open(path, encoding="utf-8") as f:
    try:
      config = json.load(f)
    except json.JSONDecodeError as e:
      raise ValueError(f"{path}:{e.lineno}: not valid JSON ({e.msg})") from e
  if not isinstance(config, dict):
    raise ValueError(f"{path}: expected a JSON object, got {type(config).__name__}")
  return config


def config_value(config, dotted, default=None):
  """``config["a"]["b"]`` for ``dotted="a.b"``; ``default`` when any level is missing."""
  node = config
  for key in dotted.split("."):
    if not isinstance(node, dict) or key not in node:
      return default
    node = node[key]
  return node
