"""A run on 2 local processes with 4 devices each logs the same metrics as one process with 8."""

import math
import os
import subprocess
import sys

from trainer_helpers import CONFIG_PATH, ROOT, child_env, comparable, read_rows, run_main

ARGS = ("--config.train.steps=3", "--config.checkpoint.every=3", "--config.log.diagnostics_every=2")


def test_two_processes_match_one_process(tmp_path):
  one = str(tmp_path / "one")
  single = run_main(one, *ARGS, devices=8)
  assert single.returncode == 0, single.stderr[-3000:]

  pod = str(tmp_path / "pod")
  cmd = [
    sys.executable,
    os.path.join(ROOT, "launch", "cpu_pod.py"),
    "--processes",
    "2",
    "--devices-per-process",
    "4",
    "--",
    f"--config={CONFIG_PATH}:runlocal=True",
    f"--workdir={pod}",
    *ARGS,
  ]
  env = child_env(8)
  env.pop("XLA_FLAGS")
  res = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
  assert res.returncode == 0, (res.stdout + res.stderr)[-4000:]
  assert "[0] " in res.stdout and "[1] " in res.stdout

  expected, got = read_rows(one), read_rows(pod)
  assert [r["step"] for r in got] == [r["step"] for r in expected] == [0, 1, 2, 3]
  for e, g in zip(expected, got):
    e, g = comparable(e), comparable(g)
    assert e.keys() == g.keys()
    for k in e:
      if e[k] is None or g[k] is None:
        assert e[k] == g[k], k
      else:
        assert math.isclose(e[k], g[k], rel_tol=1e-4, abs_tol=1e-5), (e["step"], k, e[k], g[k])
  assert sorted(os.listdir(os.path.join(pod, "checkpoints"))) == ["3"]
