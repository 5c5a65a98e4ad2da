"""notebooks/compare_runs on one small real runlocal sweep (root/<method>/seed<s>/)."""

import os
import sys

import nbformat
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
