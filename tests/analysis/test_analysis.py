"""maxnorm_jax.analysis on synthetic sweeps with known values: run summaries, seed statistics,
paired differences, the three tables and the CLI's formats."""

import io
import math

import numpy as np
import pandas as pd
import pytest

from maxnorm_jax import analysis
from maxnorm_jax.analysis import __main__ as cli
from maxnorm_jax.testing import fake_run

OFF = {"gate": False, "binning": False, "zero_group": "keep", "delta_res": 0.01}
FULL = {"gate": True, "binning": True, "zero_group": "skip", "delta_res": 0.01}
# method -> per-seed final Acc; best Acc = final + 0.05; tail kl_p95 = 10 * Acc
ACCS = {"grpo": [0.20, 0.22, 0.27], "p90_protocol": [0.30, 0.31, 0.35], "maxnorm_rloo": [0.33, 0.36, 0.36]}
PROTOCOLS = {"grpo": OFF, "p90_protocol": None, "maxnorm_rloo": FULL}


@pytest.fixture(scope="module")
def root(tmp_path_factory):
  root = tmp_path_factory.mktemp("sweep")
  for method, accs in ACCS.items():
    for seed, acc in enumerate(accs):
      fake_run.write_sweep_cell(root, method, seed, acc, acc + 0.05, 10 * acc, protocol=PROTOCOLS[method])
  fake_run.write_sweep_cell(root, "dr_grpo", 0, 0.9, 0.9, 1.0, steps=6)  # unfinished: left out
  (root / "notes").mkdir()  # not a run
  return str(root)


def test_summarize_run_last_best_and_tail(root):
  s = analysis.summarize_run(f"{root}/grpo/seed1")
  assert (s["method"], s["seed"], s["unit"], s["complete"]) == ("grpo", 1, "tiny x arith_mix", True)
  assert s["eval/reward_mean"] == pytest.approx(0.22) and s["best_eval/reward_mean"] == pytest.approx(0.27)
  assert s["eval/pass@1"] == pytest.approx(0.11) and s["eval/reward_mean_n"] == 128
  assert "best_eval/reward_mean_n" not in s
  assert s["kl_p95"] == pytest.approx(2.2)  # steps 9..10 only, not the early 99
  assert s["r_over_kl"] == pytest.approx(4.4)  # only step 10 logs it in the tail
  assert s["subres_frac"] == pytest.approx(0.5)  # NaN of step 9 skipped
  assert "time/step" not in s and s["last_eval_step"] == 10
  assert (s["protocol_gate"], s["protocol_binning"], s["zg_skip"]) == (False, False, False)
  early = analysis.summarize_run(f"{root}/dr_grpo/seed0")
  assert early["complete"] is False and early["steps"] == 6 and early["eval/reward_mean"] == pytest.approx(0.9)


def test_tail_steps():
  steps = np.arange(0, 41)
  assert steps[analysis.tail_steps(steps)].tolist() == list(range(33, 41))
  short = np.arange(0, 3)
  assert short[analysis.tail_steps(short)].tolist() == [2]


def test_load_runs_and_seed_statistics(root):
  runs = analysis.load_runs(root)
  assert sorted(set(runs["method"])) == sorted(ACCS)  # the unfinished dr_grpo run is left out
  assert len(analysis.load_runs(root, include_incomplete=True)) == 10
  stats = analysis.per_method(runs).set_index("method")
  for method, accs in ACCS.items():
    assert stats.loc[method, "n_seeds"] == 3 and stats.loc[method, "seeds"] == "0,1,2"
    assert stats.loc[method, "eval/reward_mean_mean"] == pytest.approx(np.mean(accs))
    assert stats.loc[method, "eval/reward_mean_std"] == pytest.approx(np.std(accs, ddof=1))
    assert stats.loc[method, "kl_p95_mean"] == pytest.approx(10 * np.mean(accs))
  with pytest.raises(ValueError, match="no complete runs"):
    analysis.load_runs(workdirs=[f"{root}/dr_grpo/seed0"])
  with pytest.raises(FileNotFoundError, match="is not a directory"):
    analysis.load_runs(f"{root}/nowhere")


def test_paired_difference_and_bootstrap(root):
  runs = analysis.load_runs(root)
  d = analysis.paired_difference(runs, "eval/reward_mean", "p90_protocol", "maxnorm_rloo")
  assert d.seeds == (0, 1, 2)
  np.testing.assert_allclose(d.differences, [0.03, 0.05, 0.01], atol=1e-12)
  assert d.mean == pytest.approx(0.03)
  assert 0.01 <= d.low < d.mean < d.high <= 0.05
  lo, hi = analysis.bootstrap_interval(np.array([0.5, 0.5]))
  assert lo == hi == 0.5
  with pytest.raises(KeyError, match="no runs of method 'gopo'"):
    analysis.paired_difference(runs, "eval/reward_mean", "gopo", "grpo")
  with pytest.raises(KeyError, match="no metric 'eval/nope'"):
    analysis.paired_difference(runs, "eval/nope", "grpo", "maxnorm_rloo")


def test_tables(root):
  runs = analysis.load_runs(root)
  t2 = analysis.table2(runs)
  assert t2.header == ["Method", "Protocol", "Binning", "ZG skip", "Acc", "KL P95", "n"]
  assert [r[0] for r in t2.rows] == ["grpo", "p90_protocol", "maxnorm_rloo"]  # Table 2's order
  assert t2.rows[0][1:4] == ["N", "N", "N"] and t2.rows[2][1:4] == ["Y", "Y", "Y"]
  assert t2.rows[2][4] == f"{np.mean(ACCS['maxnorm_rloo']):.3f} ± {np.std(ACCS['maxnorm_rloo'], ddof=1):.3f}"
  t1 = analysis.table1(runs)
  (row,) = t1.rows
  assert row[0] == "tiny x arith_mix" and row[1].startswith("grpo: 0.230 ± ")
  assert row[-1] == "0.030 [" + row[-1].split("[")[1] and row[3] == "–"  # gopo did not run
  assert t1.frame.loc[t1.frame["best_baseline"], "method"].tolist() == ["grpo"]
  t3 = analysis.table3(runs)
  assert t3.header[1:3] == ["Mean KL", "KL P95"] and "kl_p95" in t3.notes[0]
  paired = analysis.paired_table(runs, "maxnorm_rloo")
  assert [r[1] for r in paired.rows] == ["grpo", "p90_protocol"] and paired.rows[1][2] == "-0.030"


def test_cli_formats(root, capsys):
  assert cli.main(["--root", root, "--table", "2", "--format", "md"]) == 0
  md = capsys.readouterr().out
  assert "| Method | Protocol | Binning | ZG skip | Acc | KL P95 | n |" in md and "| grpo | N | N | N |" in md
  assert cli.main(["--root", root, "--table", "3", "--format", "latex"]) == 0
  tex = capsys.readouterr().out
  assert r"\toprule" in tex and r"$\pm$" in tex and r"maxnorm\_rloo" in tex
  assert cli.main(["--root", root, "--table", "2", "--format", "csv"]) == 0
  frame = pd.read_csv(io.StringIO(capsys.readouterr().out)).set_index("method")
  assert {"n_seeds", "eval/reward_mean_mean", "eval/reward_mean_std", "kl_p95_mean"} <= set(frame.columns)
  assert frame.loc["grpo", "eval/reward_mean_mean"] == pytest.approx(np.mean(ACCS["grpo"]))
  assert frame.loc["grpo", "n_seeds"] == 3 and math.isclose(
    frame.loc["grpo", "kl_p95_std"], np.std(np.array(ACCS["grpo"]) * 10, ddof=1)
  )
  assert cli.main(["--root", root, "--table", "1", "--format", "csv"]) == 0
  t1 = pd.read_csv(io.StringIO(capsys.readouterr().out))
  assert {"unit", "method", "n_seeds", "best_baseline"} <= set(t1.columns) and len(t1) == 3
  assert cli.main(["--root", root, "--table", "runs", "--include-incomplete"]) == 0
  assert "| dr_grpo | 0 | 6/10 |" in capsys.readouterr().out


def test_cli_errors(root, capsys):
  assert cli.main(["--root", f"{root}/nowhere", "--table", "2"]) == 2
  captured = capsys.readouterr()
  assert "is not a directory" in captured.err and captured.out == ""
  with pytest.raises(SystemExit) as e:
    cli.main(["--table", "2"])
  assert e.value.code == 2 and "give --root and/or --runs" in capsys.readouterr().err
  with pytest.raises(SystemExit):
    cli.main(["--root", root, "--table", "4"])
