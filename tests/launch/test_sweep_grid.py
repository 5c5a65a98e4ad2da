"""launch/sweep.py: the grid of commands, method validation, pod formats, local runs."""

import shlex
import subprocess
import sys

import pytest
from launch_helpers import LAUNCH, ROOT, load_launch_module

sweep = load_launch_module("sweep")


def run_cli(*args):
  return subprocess.run(
    [sys.executable, str(LAUNCH / "sweep.py"), *args], cwd=ROOT, capture_output=True, text=True, timeout=60
  )


def printed(capsys, *args):
  assert sweep.main(["--workdir-root", "runs/sweep", *args]) == 0
  return [shlex.split(line) for line in capsys.readouterr().out.splitlines()]


def test_print_gives_one_command_per_cell():
  proc = run_cli(
    "--methods",
    "grpo,maxnorm_rloo",
    "--seeds",
    "0,7",
    "--workdir-root",
    "runs/sweep",
    "--config-args",
    "runlocal=True",
    "--extra-args",
    "--config.train.steps=8 --config.loss.beta=0",
    "--print",
  )
  assert proc.returncode == 0, proc.stderr
  cmds = [shlex.split(line) for line in proc.stdout.splitlines()]
  assert len(cmds) == 4
  cells = [("grpo", 0), ("grpo", 7), ("maxnorm_rloo", 0), ("maxnorm_rloo", 7)]
  for cmd, (method, seed) in zip(cmds, cells):
    assert cmd == [
      "python",
      "-m",
      "maxnorm_jax.main",
      f"--config=configs/default.py:method={method},runlocal=True",
      f"--workdir=runs/sweep/{method}/seed{seed}",
      f"--config.seed={seed}",
      "--config.train.steps=8",
      "--config.loss.beta=0",
    ]


def test_unknown_methods_are_rejected_by_name():
  proc = run_cli("--methods", "grpo,nosuch_method,other", "--seeds", "0", "--workdir-root", "r", "--print")
  assert proc.returncode != 0
  assert "nosuch_method" in proc.stderr and "other" in proc.stderr
  assert "maxnorm_rloo" in proc.stderr  # the known rows are listed
  assert proc.stdout == ""


def test_pod_tpu_format(capsys):
  cmds = printed(
    capsys,
    "--methods",
    "maxnorm_rloo",
    "--seeds",
    "1,2",
    "--pod",
    "tpu",
    "--pod-args",
    "--zone us-east5-a --accelerator-type v5p-32",
  )
  assert len(cmds) == 2
  for cmd, seed in zip(cmds, (1, 2)):
    split = cmd.index("--")
    assert cmd[:split] == [
      "launch/tpu_pod.sh",
      "--name",
      f"maxnorm-maxnorm-rloo-s{seed}",
      "--zone",
      "us-east5-a",
      "--accelerator-type",
      "v5p-32",
    ]
    assert cmd[split + 1 :] == [
      "--config=configs/default.py:method=maxnorm_rloo",
      f"--workdir=runs/sweep/maxnorm_rloo/seed{seed}",
      f"--config.seed={seed}",
    ]


def test_pod_cpu_format(capsys):
  (cmd,) = printed(capsys, "--methods", "grpo", "--seeds", "0", "--pod", "cpu")
  assert cmd == [
    "python",
    "launch/cpu_pod.py",
    "--processes",
    "2",
    "--devices-per-process",
    "4",
    "--",
    "--config=configs/default.py:method=grpo",
    "--workdir=runs/sweep/grpo/seed0",
    "--config.seed=0",
  ]
  (cmd,) = printed(capsys, "--methods", "grpo", "--seeds", "0", "--pod", "cpu", "--pod-args", "--processes 4")
  assert cmd[: cmd.index("--")] == ["python", "launch/cpu_pod.py", "--processes", "4"]


@pytest.mark.parametrize(
  "args, message",
  [
    (["--methods", "grpo", "--seeds", "0,x"], "not an integer"),
    (["--methods", "grpo,grpo", "--seeds", "0"], "repeats grpo"),
    (["--methods", "grpo", "--seeds", "0", "--config-args", "method=gopo"], "must not set method"),
    (["--methods", "grpo", "--seeds", "0", "--config", "configs/nosuch.py"], "not found"),
    (["--methods", "grpo", "--seeds", "0", "--print", "--pod", "cpu"], "not allowed with"),
  ],
)
def test_usage_errors(capsys, args, message):
  with pytest.raises(SystemExit) as e:
    sweep.main(["--workdir-root", "r", *args])
  assert e.value.code == 2
  assert message in capsys.readouterr().err


def test_local_run_stops_at_the_first_failure_unless_keep_going():
  cells = sweep.make_cells(["grpo", "gopo"], [0, 1], "root")
  codes = {("grpo", 1): 5, ("gopo", 0): 6}

  def fake_call(cmd):
    calls.append(cmd)
    method = cmd[cmd.index("-m") + 2].split("method=")[1]
    seed = int(cmd[-1].split("=")[1])
    return codes.get((method, seed), 0)

  calls, log = [], []
  assert sweep.run_local(cells, call=fake_call, log=log.append) == 5
  assert len(calls) == 2 and calls[0][0] == sys.executable
  assert "method=grpo seed=1 failed with exit code 5" in log[-1] and "root/grpo/seed1" in log[-1]

  calls, log = [], []
  assert sweep.run_local(cells, keep_going=True, call=fake_call, log=log.append) == 5
  assert len(calls) == 4
  assert "2 of 4 cells failed" in log[-1] and "method=gopo seed=0 (code 6)" in log[-1]


def test_preempted_cells_are_unfinished_and_resumed_finished_ones_skipped(tmp_path):
  """Issue 12.8: exit 75 (SIGTERM, step saved) is neither success nor failure."""
  import os

  cells = sweep.make_cells(["grpo"], [0, 1, 2], str(tmp_path))

  def fake_call(cmd):
    workdir = next(a.split("=", 1)[1] for a in cmd if a.startswith("--workdir="))
    calls.append(workdir)
    os.makedirs(os.path.join(workdir, "checkpoints"), exist_ok=True)
    if workdir.endswith("seed1") and len(calls) == 2:
      return sweep.PREEMPTED_EXIT_CODE  # the first attempt at seed 1 is preempted
    open(os.path.join(workdir, sweep.FINISHED_FILE), "w").write('{"step": 3}')
    return 0

  calls, log = [], []
  assert sweep.run_local(cells, keep_going=True, call=fake_call, log=log.append) == 75
  assert [c.rsplit("/", 1)[1] for c in calls] == ["seed0", "seed1"]  # stops: the sweep was preempted too
  assert "method=grpo seed=1 is unfinished (preempted" in log[-1]
  assert [sweep.cell_state(c) for c in cells] == ["finished", "started", "new"]

  calls, log = [], []
  assert sweep.run_local(cells, call=fake_call, log=log.append) == 0
  assert [c.rsplit("/", 1)[1] for c in calls] == ["seed1", "seed2"]
  assert "finished already" in log[0] and "resuming: " in log[1] and "resuming: " not in log[2]
