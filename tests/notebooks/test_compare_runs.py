"""notebooks/compare_runs and the analysis CLI on one small real runlocal sweep (root/<method>/seed<s>/)."""

import io
import json
import os
import subprocess
import sys

import nbformat
import numpy as np
import pandas as pd
import pytest

from maxnorm_jax.testing import notebooks
from maxnorm_jax.train import train

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "tests", "train"))
from trainer_helpers import config_module  # noqa: E402

NOTEBOOK_PY = os.path.join(ROOT, "notebooks", "compare_runs.py")
NOTEBOOK_IPYNB = os.path.join(ROOT, "notebooks", "compare_runs.ipynb")
METHODS = ("grpo", "p90_protocol", "maxnorm_rloo")
SEEDS = (0, 1)


@pytest.fixture(scope="module")
def sweep(tmp_path_factory):
  """3 rows x 2 seeds of the runlocal config on arith_mix, trained in this process (shared compilations)."""
  root = tmp_path_factory.mktemp("sweep")
  for method in METHODS:
    for seed in SEEDS:
      c = config_module().get_config(f"method={method},task=arith_mix,runlocal=True")
      c.seed = seed
      c.log.tensorboard = False
      train(c, str(root / method / f"seed{seed}"))
  return str(root)


def _last_eval(workdir, name="eval/reward_mean"):
  with open(os.path.join(workdir, "metrics.jsonl")) as f:
    rows = [json.loads(line) for line in f if line.strip()]
  return [r[name] for r in rows if r.get(name) is not None][-1]


def _cli(*args):
  out = subprocess.run(
    [sys.executable, "-m", "maxnorm_jax.analysis", *args], capture_output=True, text=True, timeout=300, cwd=ROOT
  )
  assert out.returncode == 0, out.stderr
  return out.stdout


def test_cli_on_a_real_sweep(sweep):
  md = _cli("--root", sweep, "--table", "2", "--format", "md")
  assert "| grpo | N | N | N |" in md and "| p90_protocol | Y | N | Y |" in md and "| maxnorm_rloo | Y | Y | Y |" in md
  frame = pd.read_csv(io.StringIO(_cli("--root", sweep, "--table", "2", "--format", "csv"))).set_index("method")
  for method in METHODS:
    accs = [_last_eval(os.path.join(sweep, method, f"seed{s}")) for s in SEEDS]
    assert frame.loc[method, "n_seeds"] == 2
    assert frame.loc[method, "eval/reward_mean_mean"] == pytest.approx(np.mean(accs))
    assert frame.loc[method, "eval/reward_mean_std"] == pytest.approx(np.std(accs, ddof=1))
  t3 = pd.read_csv(io.StringIO(_cli("--root", sweep, "--table", "3", "--format", "csv"))).set_index("method")
  assert t3.loc["maxnorm_rloo", "inv_scale_p99_mean"] <= 100.0 + 1e-3  # 1 / tau_res
  tex = _cli("--root", sweep, "--table", "1", "--format", "latex")
  assert r"\begin{tabular}" in tex and "tiny x arith\\_mix" in tex


def test_notebook_executes_on_the_sweep(sweep):
  nb = notebooks.execute_notebook(NOTEBOOK_PY, sweep, timeout=300)
  errors = [o for c in nb.cells for o in c.get("outputs", []) if o.output_type == "error"]
  assert errors == []
  text = notebooks.outputs_text(nb)
  assert "runs: 6 in 1 unit(s)" in text
  for title in ("Table 1", "Table 2: component ablation", "Table 3", "Paired differences vs maxnorm_rloo"):
    assert title in text, title
  assert notebooks.count_outputs(nb, "image/png") >= 1


def test_ipynb_in_sync_with_py():
  import jupytext

  from_py = jupytext.read(NOTEBOOK_PY)
  ipynb = nbformat.read(NOTEBOOK_IPYNB, as_version=4)
  assert notebooks.code_cells(ipynb) == notebooks.code_cells(from_py), (
    "notebooks/compare_runs.ipynb is stale: run `jupytext --to ipynb notebooks/compare_runs.py`"
  )
  for cell in ipynb.cells:
    if cell.cell_type == "code":
      assert cell.outputs == [] and cell.execution_count is None
