"""The lab's CLI (`python -m maxnorm_jax.lab --workdir=...`) prints Table 3 and writes its PNGs."""

import json
import os

from maxnorm_jax.lab import __main__ as main_module

PNGS = ("jitter_kl.png", "credible_gaps.png", "binary_reward.png", "arcsine_limit.png", "implied_transforms.png")


def _is_png(path):
  with open(path, "rb") as f:
    return f.read(8) == b"\x89PNG\r\n\x1a\n"


def test_lab_run_writes_figures_and_summary(lab_result):
  names = {os.path.basename(f) for f in lab_result.files}
  assert set(PNGS) <= names and "summary.json" in names
  for f in lab_result.files:
    assert os.path.getsize(f) > 1000
    if f.endswith(".png"):
      assert _is_png(f)


def test_lab_cli_prints_the_table_and_writes_pngs(tmp_path, capsys, lab_result):
  # lab_result first: the compiled simulations are shared, so this run only re-executes them.
  workdir = tmp_path / "run"
  main_module.FLAGS(["main", f"--workdir={workdir}"])
  main_module.main(["main"])
  out = capsys.readouterr().out
  assert "Table 3" in out and "MaxNorm-RLOO" in out and "Arcsine check" in out
  for name in PNGS:
    assert _is_png(workdir / name), name
    assert str(workdir / name) in out
  summary = json.loads((workdir / "summary.json").read_text())
  assert len(summary["table3"]) == len(lab_result.rows)
  assert summary["claims"] == lab_result.claims
