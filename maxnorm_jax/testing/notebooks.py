"""Headless execution of the project's notebooks against a run directory.

`execute_notebook(path, workdir)` runs a notebook (a jupytext ``.py`` or an ``.ipynb``) top to
bottom in a fresh kernel of *this* interpreter (``KERNEL_CMD``: ``sys.executable``, whatever
kernelspecs are installed) with ``MAXNORM_WORKDIR`` set to ``workdir``, and returns the executed
notebook (figures come back as image/png through the notebook's ``%matplotlib inline``). A failing cell raises ``nbclient.exceptions.CellExecutionError``.

    from maxnorm_jax.testing.notebooks import execute_notebook
    nb = execute_notebook("notebooks/inspect_run.py", "runs/default")
"""

import os
import sys

import nbformat

KERNEL_CMD = [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"]


def read_notebook(path):
  """The notebook at ``path``: a jupytext percent ``.py`` (via jupytext) or an ``.ipynb``."""
  path = os.fspath(path)
  if path.endswith(".py"):
    import jupytext  # only needed for .py notebooks

    return jupytext.read(path)
  return nbformat.read(path, as_version=4)


def code_cells(nb):
  """The sources of the code cells of ``nb`` (list of str), for comparing paired notebooks."""
  return [c.source for c in nb.cells if c.cell_type == "code"]


def kernel_manager():
  """A KernelManager whose python3 kernel is this interpreter, whatever kernelspecs exist."""
  from jupyter_client.kernelspec import KernelSpec, KernelSpecManager
  from jupyter_client.manager import KernelManager

  class _ThisPython(KernelSpecManager):
    def get_kernel_spec(self, kernel_name):
      return KernelSpec(
        argv=list(KERNEL_CMD),
        display_name="Python 3 (maxnorm_jax)",
        language="python",
        resource_dir=os.path.dirname(sys.executable),
      )

  return KernelManager(kernel_name="python3", kernel_spec_manager=_ThisPython())


def execute_notebook(path, workdir, timeout=120):
  """Executes the notebook at ``path`` with ``MAXNORM_WORKDIR=workdir``; returns it with outputs.

  Args:
      path: a ``.py`` (jupytext percent) or ``.ipynb`` notebook.
      workdir: the run directory the notebook reads (made absolute).
      timeout: seconds allowed per cell.

  Returns:
      the executed ``nbformat.NotebookNode``.

  Raises:
      nbclient.exceptions.CellExecutionError: a cell raised.
  """
  from nbclient import NotebookClient

  nb = read_notebook(path)
  env = dict(os.environ)
  env["MAXNORM_WORKDIR"] = os.path.abspath(os.fspath(workdir))
  cwd = os.path.dirname(os.path.abspath(os.fspath(path)))
  client = NotebookClient(
    nb,
    timeout=timeout,
    kernel_name="python3",
    km=kernel_manager(),
    resources={"metadata": {"path": cwd}},
  )
  client.execute(cwd=cwd, env=env)
  return nb


def outputs_text(nb):
  """All text of the outputs of ``nb`` (streams, and text/plain of results and displays)."""
  parts = []
  for cell in nb.cells:
    for out in cell.get("outputs", []):
      if out.get("output_type") == "stream":
        parts.append(out.get("text", ""))
      elif "data" in out:
        parts.append(out["data"].get("text/plain", ""))
      elif out.get("output_type") == "error":
        parts.append("\n".join(out.get("traceback", [])))
  return "\n".join(parts)


def count_outputs(nb, mime):
  """How many outputs of ``nb`` carry ``mime`` (e.g. ``"image/png"``)."""
  return sum(1 for cell in nb.cells for out in cell.get("outputs", []) if mime in out.get("data", {}))
