"""launch/cpu_pod.py: environment of each process, a real 2-process pod, failure and signal handling."""

import io
import os
import queue
import signal
import subprocess
import sys
import threading
import time

from launch_helpers import LAUNCH, PROBE, ROOT, load_launch_module

cpu_pod = load_launch_module("cpu_pod")


def pod_command(*flags, mode, devices_per_process=2) -> list[str]:
  """A 2-process pod running the probe script in `mode`."""
  pod = ["--processes", "2", "--devices-per-process", str(devices_per_process)]
  return [sys.executable, str(LAUNCH / "cpu_pod.py"), *pod, *flags, "--script", str(PROBE), "--", mode]


def launch(*flags, mode, timeout=60):
  cmd = pod_command(*flags, mode=mode)
  start = time.monotonic()
  proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=timeout)
  return proc, time.monotonic() - start


def pid_alive(pid: int) -> bool:
  try:
    os.kill(pid, 0)
  except ProcessLookupError:
    return False
  # A zombie (exited, not yet reaped by its parent) counts as gone.
  try:
    with open(f"/proc/{pid}/stat") as f:
      return f.read().split(")")[-1].split()[0] != "Z"
  except FileNotFoundError:
    return False


def test_child_env_sets_the_pod_variables():
  base = {
    "XLA_FLAGS": "--xla_foo=1 --xla_force_host_platform_device_count=8",
    "PATH": "/bin",
    "MAXNORM_TPU_POD": "1",
    "JAX_PLATFORMS": "tpu",
  }
  env = cpu_pod.child_env(1, 3, 4, "127.0.0.1:1234", base=base)
  assert env["XLA_FLAGS"] == "--xla_foo=1 --xla_force_host_platform_device_count=4"
  assert env["JAX_PLATFORMS"] == "cpu"
  assert (env["MAXNORM_COORDINATOR"], env["MAXNORM_NUM_PROCESSES"], env["MAXNORM_PROCESS_ID"]) == (
    "127.0.0.1:1234",
    "3",
    "1",
  )
  assert env["PATH"] == "/bin" and "MAXNORM_TPU_POD" not in env
  assert base["JAX_PLATFORMS"] == "tpu"  # the base is not modified
  assert cpu_pod.child_env(0, 1, 2, "h:1", base={})["XLA_FLAGS"] == "--xla_force_host_platform_device_count=2"
  assert cpu_pod.child_command(["--a"], module="m") == [sys.executable, "-m", "m", "--a"]
  assert 0 < cpu_pod.free_port() < 65536


def test_pod_of_two_processes_joins_and_reduces():
  proc, seconds = launch(mode="ok")
  assert proc.returncode == 0, proc.stdout + proc.stderr
  for i in (0, 1):
    assert f"[{i}] RESULT process={i} gathered=[1, 2] psum=6.0" in proc.stdout.splitlines(), proc.stdout
  assert seconds < 30


def test_failing_process_stops_the_pod_with_its_code():
  proc, seconds = launch(mode="fail")
  assert proc.returncode == 3, proc.stdout + proc.stderr
  assert "[1] failing with code 3" in proc.stdout
  assert "NOT KILLED" not in proc.stdout
  pid = int(next(line for line in proc.stdout.splitlines() if line.startswith("[0] PID ")).split()[-1])
  assert not pid_alive(pid)
  assert seconds < 30


def test_process_ignoring_sigterm_is_killed_after_the_grace_period():
  proc, seconds = launch("--grace", "1", mode="stubborn")
  assert proc.returncode == 3, proc.stdout + proc.stderr
  assert "NOT KILLED" not in proc.stdout
  pid = int(next(line for line in proc.stdout.splitlines() if line.startswith("[0] PID ")).split()[-1])
  assert not pid_alive(pid)
  assert 1 <= seconds < 30


def test_sigterm_is_forwarded_to_every_process():
  cmd = pod_command(mode="wait", devices_per_process=1)
  proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
  lines: queue.Queue = queue.Queue()
  threading.Thread(target=lambda: [lines.put(line.rstrip("\n")) for line in proc.stdout], daemon=True).start()
  seen: list[str] = []
  try:
    deadline = time.monotonic() + 20
    while not {"[0] ready", "[1] ready"} <= set(seen):
      seen.append(lines.get(timeout=max(0.1, deadline - time.monotonic())))
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=20) == 0
  finally:
    if proc.poll() is None:
      proc.kill()
      proc.wait()
  time.sleep(0.2)
  while not lines.empty():
    seen.append(lines.get())
  assert f"[0] got signal {int(signal.SIGTERM)}" in seen, seen
  assert f"[1] got signal {int(signal.SIGTERM)}" in seen, seen


def test_run_pod_returns_the_failing_code():
  out = io.StringIO()
  rc = cpu_pod.run_pod(2, 1, ["fail"], script=str(PROBE), out=out, grace_s=5.0)
  assert rc == 3
  text = out.getvalue()
  assert "[1] failing with code 3" in text and "process 1 exited with code 3" in text


def test_bad_arguments_are_usage_errors():
  for flags in (["--processes", "0", "--devices-per-process", "1"], ["--devices-per-process", "1"]):
    proc = subprocess.run(
      [sys.executable, str(LAUNCH / "cpu_pod.py"), *flags], cwd=ROOT, capture_output=True, text=True, timeout=30
    )
    assert proc.returncode == 2
    assert "--processes" in proc.stderr
