"""Checkpoints: a run killed with SIGKILL after a checkpoint resumes and logs the same metrics as a
run that was never killed; SIGTERM saves the current step and stops cleanly."""

import os
import signal
import subprocess
import time

from trainer_helpers import ROOT, child_env, comparable, main_command, read_rows, run_main

STEPS = 30
ARGS = (
  f"--config.train.steps={STEPS}",
  "--config.checkpoint.every=2",
  "--config.eval.every=10",
  "--config.log.diagnostics_every=3",
  "--config.log.cards_every=0",
  "--config.checkpoint.max_to_keep=50",
)


def _checkpoints(workdir):
  d = os.path.join(workdir, "checkpoints")
  if not os.path.isdir(d):
    return []
  return sorted(int(n) for n in os.listdir(d) if n.isdigit())


def _start(workdir):
  return subprocess.Popen(
    main_command(workdir, *ARGS),
    cwd=ROOT,
    env=child_env(8),
    stdout=subprocess.PIPE,
    stderr=subprocess.STDOUT,
    text=True,
  )


def _wait_for_checkpoint(proc, workdir, at_least, timeout=600):
  end = time.time() + timeout
  while time.time() < end:
    done = [
      s
      for s in _checkpoints(workdir)
      if os.path.exists(os.path.join(workdir, "checkpoints", str(s), "_CHECKPOINT_METADATA"))
    ]
    if done and max(done) >= at_least:
      return max(done)
    if proc.poll() is not None:
      raise AssertionError(f"run ended (rc={proc.returncode}) before a checkpoint: {proc.stdout.read()[-3000:]}")
    time.sleep(0.01)
  raise AssertionError("no checkpoint in time")


def test_sigkill_then_resume_logs_the_same_metrics(tmp_path):
  whole = str(tmp_path / "whole")
  ref = run_main(whole, *ARGS)
  assert ref.returncode == 0, ref.stderr[-3000:]
  # the run says where it writes, then prints the SFT summary and each evaluation as it happens
  assert f"run directory: {whole}\n  metrics:     {whole}/metrics.jsonl" in ref.stdout
  assert "SFT warm start: 30 steps, loss " in ref.stdout and "SFT warm start" not in ref.stderr
  assert [ln.split(":")[0] for ln in ref.stdout.splitlines() if ln.startswith("eval step")] == [
    f"eval step {s}" for s in (0, 10, 20, 30)
  ]
  expected = {r["step"]: comparable(r) for r in read_rows(whole)}

  killed = str(tmp_path / "killed")
  proc = _start(killed)
  _wait_for_checkpoint(proc, killed, 2)
  proc.send_signal(signal.SIGKILL)
  proc.wait(timeout=30)
  assert proc.returncode == -signal.SIGKILL
  last = max(_checkpoints(killed))
  assert last < STEPS, "the run finished before it was killed; the test proves nothing"

  again = run_main(killed, *ARGS)
  assert again.returncode == 0, again.stderr[-3000:]
  assert "resumed from step" in again.stderr
  rows = read_rows(killed)
  assert [r["step"] for r in rows] == sorted(expected)  # no step lost or repeated
  for r in rows:
    if r["step"] > last:
      assert comparable(r) == expected[r["step"]], f"step {r['step']} differs after resuming from {last}"
  assert any(r["step"] > last for r in rows)


def test_sigterm_saves_the_current_step_and_stops(tmp_path):
  workdir = str(tmp_path / "run")
  proc = _start(workdir)
  _wait_for_checkpoint(proc, workdir, 2)
  proc.send_signal(signal.SIGTERM)
  out, _ = proc.communicate(timeout=120)
  # Preemption is not success (issue 12.8): a distinct status, no "done:", no FINISHED.json.
  assert proc.returncode == 75, out[-3000:]
  assert "SIGTERM" in out and "saving step" in out and "preempted: step" in out and "done:" not in out
  assert not os.path.exists(os.path.join(workdir, "FINISHED.json"))
  rows = read_rows(workdir)
  stopped = rows[-1]["step"]
  assert stopped < STEPS
  assert max(_checkpoints(workdir)) == stopped  # the step it stopped at is saved, odd or even
  assert all(r["verify/timeouts"] == 0 and r["verify/crashes"] == 0 for r in rows if r["step"] > 0)

  # Config drift (issue 12.7): another method, or more steps without saying so, is refused by name
  # and config.json (written only after a successful restore) keeps the original.
  with open(os.path.join(workdir, "config.json")) as f:
    original = f.read()
  drift = run_main(workdir, *ARGS[1:], f"--config.train.steps={stopped + 1}", config_arg="runlocal=True,method=grpo")
  assert drift.returncode == 1, drift.stderr[-3000:]
  assert "trained with a different config" in drift.stderr
  assert "advantage.estimator: 'maxnorm_rloo' -> 'grpo'" in drift.stderr
  assert f"train.steps: {STEPS} -> {stopped + 1}" in drift.stderr
  with open(os.path.join(workdir, "config.json")) as f:
    assert f.read() == original
  # An explicitly allowed change resumes and finishes.
  more = run_main(
    workdir,
    *ARGS[1:],
    f"--config.train.steps={stopped + 1}",
    "--config.checkpoint.allow_changed=train.steps",
    timeout=900,
  )
  assert more.returncode == 0, more.stderr[-3000:]
  assert f"resumed from step {stopped}" in more.stderr and "done:" in more.stdout
  assert read_rows(workdir)[-1]["step"] == stopped + 1
  assert os.path.exists(os.path.join(workdir, "FINISHED.json"))
