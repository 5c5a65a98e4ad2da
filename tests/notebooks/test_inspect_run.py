"""notebooks/inspect_run: executes headless on a synthetic run, and its .py/.ipynb pair is in sync."""

import os
import sys

import nbformat
import pytest

from maxnorm_jax.testing import fake_run, notebooks

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
NOTEBOOK_PY = os.path.join(ROOT, "notebooks", "inspect_run.py")
NOTEBOOK_IPYNB = os.path.join(ROOT, "notebooks", "inspect_run.ipynb")
METHOD = "synthetic_method_xyz"


@pytest.fixture(scope="module")
def executed(tmp_path_factory):
  workdir = fake_run.write_synthetic_run(tmp_path_factory.mktemp("run"), method=METHOD)
  return notebooks.execute_notebook(NOTEBOOK_PY, workdir, timeout=120)


def test_notebook_executes(executed):
  errors = [o for c in executed.cells for o in c.get("outputs", []) if o.output_type == "error"]
  assert errors == []
  text = notebooks.outputs_text(executed)
  assert f"method:    {METHOD}" in text
  assert f"estimator: {fake_run.ESTIMATOR}" in text
  assert f"card of step {fake_run.CARD_STEPS[-1]}" in text
  # the curves, the eval plot and the card plot
  assert notebooks.count_outputs(executed, "image/png") >= 3


def test_notebook_kernel_is_this_python():
  assert notebooks.KERNEL_CMD[0] == sys.executable
  km = notebooks.kernel_manager()
  assert km.kernel_spec.argv[0] == sys.executable


def test_ipynb_in_sync_with_py():
  import jupytext

  from_py = jupytext.read(NOTEBOOK_PY)
  ipynb = nbformat.read(NOTEBOOK_IPYNB, as_version=4)
  assert notebooks.code_cells(ipynb) == notebooks.code_cells(from_py), (
    "notebooks/inspect_run.ipynb is stale: run `jupytext --to ipynb notebooks/inspect_run.py`"
  )
  assert [c.cell_type for c in ipynb.cells] == [c.cell_type for c in from_py.cells]
  for cell in ipynb.cells:
    if cell.cell_type == "code":
      assert cell.outputs == [] and cell.execution_count is None
  assert ipynb.metadata["jupytext"]["formats"] == "ipynb,py:percent"
