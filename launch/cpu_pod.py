#!/usr/bin/env python3
"""A local "CPU pod": N processes of one program joined by jax.distributed over gloo.

  python launch/cpu_pod.py --processes 2 --devices-per-process 4 -- --config=configs/default.py:runlocal=True

Each process runs `sys.executable -m MODULE ARGS` (or `sys.executable SCRIPT ARGS` with --script)
with JAX_PLATFORMS=cpu, M simulated devices, and the MAXNORM_* variables that
`maxnorm_jax.parallel.distributed.initialize_from_env()` reads. Every output line of process i is
printed as "[i] line". SIGTERM and SIGINT are forwarded to every process. When one process exits
non-zero the others get SIGTERM, then SIGKILL after --grace seconds, and the launcher exits with
the failing code (128 + signal for a process killed by a signal); otherwise it exits 0.
"""

from __future__ import annotations

import argparse
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from typing import Mapping, Sequence, TextIO

DEVICE_COUNT_FLAG = "--xla_force_host_platform_device_count"
DEFAULT_MODULE = "maxnorm_jax.main"


def free_port() -> int:
  """A TCP port that is free now (bind to port 0 and let the OS choose)."""
  with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
    s.bind(("127.0.0.1", 0))
    return s.getsockname()[1]


def xla_flags(existing: str, devices_per_process: int) -> str:
  """`existing` XLA_FLAGS without any device-count flag, plus ours."""
  kept = [f for f in existing.split() if not f.startswith(DEVICE_COUNT_FLAG)]
  return " ".join(kept + [f"{DEVICE_COUNT_FLAG}={devices_per_process}"])


def child_env(
  process_id: int, num_processes: int, devices_per_process: int, coordinator: str, base: Mapping[str, str] | None = None
) -> dict[str, str]:
  """The environment of process `process_id`: `base` (default os.environ) plus the pod's variables."""
  env = dict(os.environ if base is None else base)
  env["JAX_PLATFORMS"] = "cpu"
  env["XLA_FLAGS"] = xla_flags(env.get("XLA_FLAGS", ""), devices_per_process)
  env["MAXNORM_COORDINATOR"] = coordinator
  env["MAXNORM_NUM_PROCESSES"] = str(num_processes)
  env["MAXNORM_PROCESS_ID"] = str(process_id)
  env.pop("MAXNORM_TPU_POD", None)  # would make initialize_from_env look for TPU peers
  env["PYTHONUNBUFFERED"] = "1"  # lines reach the launcher as they are printed
  return env


def child_command(args: Sequence[str], module: str | None = DEFAULT_MODULE, script: str | None = None) -> list[str]:
  """`python -m module args`, or `python script args` when `script` is given."""
  if script is not None:
    return [sys.executable, script, *args]
  if not module:
    raise ValueError("child_command needs a module or a script")
  return [sys.executable, "-m", module, *args]


def exit_code(returncode: int) -> int:
  """A child's return code as a shell exit code (killed by signal s -> 128 + s)."""
  return 128 - returncode if returncode < 0 else returncode


def _pump(i: int, pipe, out: TextIO, lock: threading.Lock) -> None:
  """Copies the lines of child i's merged stdout/stderr to `out`, prefixed with "[i] "."""
  for raw in iter(pipe.readline, b""):
    line = raw.decode("utf-8", errors="replace").rstrip("\r\n")
    with lock:
      out.write(f"[{i}] {line}\n")
      out.flush()
  pipe.close()


def _signal(proc: subprocess.Popen, sig: int, group: bool = False) -> None:
  """Sends `sig` to a running child (to its whole process group when `group`)."""
  if proc.poll() is not None:
    return
  try:
    if group:
      os.killpg(proc.pid, sig)
    else:
      proc.send_signal(sig)
  except (ProcessLookupError, PermissionError):
    pass


def run_pod(
  num_processes: int,
  devices_per_process: int,
  args: Sequence[str] = (),
  module: str | None = DEFAULT_MODULE,
  script: str | None = None,
  port: int | None = None,
  grace_s: float = 10.0,
  out: TextIO | None = None,
  poll_s: float = 0.05,
) -> int:
  """Runs the pod to completion and returns the launcher's exit code (0, or the first failure's)."""
  if num_processes < 1:
    raise ValueError(f"--processes must be >= 1, got {num_processes}")
  if devices_per_process < 1:
    raise ValueError(f"--devices-per-process must be >= 1, got {devices_per_process}")
  out = sys.stdout if out is None else out
  coordinator = f"127.0.0.1:{free_port() if port is None else port}"
  cmd = child_command(args, module, script)
  lock = threading.Lock()
  procs: list[subprocess.Popen] = []
  pumps: list[threading.Thread] = []
  received: list[int] = []

  def forward(signum, _frame):
    received.append(signum)
    # A second signal escalates: kill every process group outright.
    for p in procs:
      _signal(p, signal.SIGKILL if len(received) > 1 else signum, group=len(received) > 1)

  in_main_thread = threading.current_thread() is threading.main_thread()
  previous = {}
  if in_main_thread:
    for sig in (signal.SIGTERM, signal.SIGINT):
      previous[sig] = signal.signal(sig, forward)
  try:
    for i in range(num_processes):
      if received:  # interrupted while starting: start no more
        break
      # Own session: a Ctrl-C in the terminal reaches the children once, through `forward`.
      p = subprocess.Popen(
        cmd,
        env=child_env(i, num_processes, devices_per_process, coordinator),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL,
        start_new_session=True,
      )
      procs.append(p)
      t = threading.Thread(target=_pump, args=(i, p.stdout, out, lock), daemon=True)
      t.start()
      pumps.append(t)

    failure: int | None = None
    kill_at: float | None = None
    while None in [p.poll() for p in procs]:  # polls every child (any() would stop early)
      if failure is None:
        for i, p in enumerate(procs):
          if p.returncode not in (None, 0):
            failure = exit_code(p.returncode)
            with lock:
              out.write(f"cpu_pod: process {i} exited with code {failure}; stopping the others\n")
              out.flush()
            for q in procs:
              _signal(q, signal.SIGTERM)
            kill_at = time.monotonic() + grace_s
            break
      elif kill_at is not None and time.monotonic() >= kill_at:
        for q in procs:
          _signal(q, signal.SIGKILL, group=True)
        kill_at = None
      time.sleep(poll_s)
    if failure is None:
      failed = [p.returncode for p in procs if p.returncode != 0]
      failure = exit_code(failed[0]) if failed else 0
    for t in pumps:
      t.join(timeout=5.0)  # a grandchild may still hold the pipe open
    return failure
  finally:
    for p in procs:  # only on an exception above: leave no process behind
      _signal(p, signal.SIGKILL, group=True)
    for sig, handler in previous.items():
      signal.signal(sig, handler)


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
  """Parses the launcher's flags; everything after `--` goes to the program."""
  argv = list(sys.argv[1:] if argv is None else argv)
  if "--" in argv:
    split = argv.index("--")
    argv, rest = argv[:split], argv[split + 1 :]
  else:
    rest = []
  parser = argparse.ArgumentParser(
    prog="cpu_pod.py",
    description="Run N local CPU processes joined by jax.distributed.",
    usage="%(prog)s --processes N --devices-per-process M [--port P] [--module MOD | --script PATH] "
    "[--grace S] -- ARGS...",
  )
  parser.add_argument("--processes", type=int, required=True, help="number of processes N")
  parser.add_argument("--devices-per-process", type=int, required=True, help="CPU devices per process M")
  parser.add_argument("--port", type=int, default=None, help="coordinator port (default: a free one)")
  which = parser.add_mutually_exclusive_group()
  which.add_argument("--module", default=DEFAULT_MODULE, help=f"module to run with -m (default {DEFAULT_MODULE})")
  which.add_argument("--script", default=None, help="a Python file to run instead of a module")
  parser.add_argument(
    "--grace",
    type=float,
    default=10.0,
    help="seconds between SIGTERM and SIGKILL when stopping the others (default 10)",
  )
  ns = parser.parse_args(argv)
  if ns.processes < 1:
    parser.error(f"--processes must be >= 1, got {ns.processes}")
  if ns.devices_per_process < 1:
    parser.error(f"--devices-per-process must be >= 1, got {ns.devices_per_process}")
  if ns.port is not None and not 0 < ns.port < 65536:
    parser.error(f"--port must lie in [1, 65535], got {ns.port}")
  if ns.script is not None and not os.path.isfile(ns.script):
    parser.error(f"--script {ns.script!r} is not a file")
  ns.args = rest
  return ns


def main(argv: Sequence[str] | None = None) -> int:
  ns = parse_args(argv)
  return run_pod(
    ns.processes, ns.devices_per_process, ns.args, module=ns.module, script=ns.script, port=ns.port, grace_s=ns.grace
  )


if __name__ == "__main__":
  sys.exit(main())
