"""Killable worker processes: run a function in a child process and kill it at a deadline.

math-verify's own timeouts use SIGALRM, which only works in the main thread and does not
interrupt C-level sympy work; the only deadline that holds is a process killed from outside.
`WorkerProcess` is one such child (a fresh interpreter, not a fork, so a parent holding JAX threads
is safe);
`KillableWorker` wraps it into a call-with-deadline that replaces a child that hung or died.
"""

from __future__ import annotations

import multiprocessing.connection as mpc
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import traceback
from typing import Any, Callable

#: Set to True inside a worker process: code that would otherwise start its own killable
#: child (MathVerifier) runs inline, because the worker itself is killed at the deadline.
IN_WORKER = False


def _set_parent_death_signal() -> None:
  """Linux: the kernel SIGKILLs this process when its parent dies (no orphaned workers)."""
  try:
    import ctypes
    import signal

    ctypes.CDLL(None, use_errno=True).prctl(1, int(signal.SIGKILL), 0, 0, 0)  # PR_SET_PDEATHSIG
  except Exception:  # not Linux: the worker still exits on EOF of its pipe
    pass


def _limit_memory(memory_mb: int | None) -> None:
  """Caps this process's address space (soft RLIMIT_AS): a runaway verifier gets MemoryError, not
  the host's memory. Only the soft limit, so a sandbox started from here may set its own."""
  if not memory_mb:
    return
  import resource

  _, hard = resource.getrlimit(resource.RLIMIT_AS)
  limit = int(memory_mb) << 20
  if hard != resource.RLIM_INFINITY:
    limit = min(limit, hard)
  resource.setrlimit(resource.RLIMIT_AS, (limit, hard))


def _entry(fd: int, memory_mb: int | None = None) -> None:
  """The child's main: receive the function, then loop on args -> ("ok", value) | ("error", text)."""
  global IN_WORKER
  IN_WORKER = True
  _set_parent_death_signal()
  _limit_memory(memory_mb)
  import logging

  logging.getLogger("math_verify").setLevel(logging.ERROR)
  conn = mpc.Connection(fd)
  fn, warmup = conn.recv()
  if warmup is not None:
    try:
      warmup()
    except Exception:  # a failed warm-up only costs the first item's time
      pass
  conn.send(("ready", None))
  while True:
    try:
      msg = conn.recv()
    except (EOFError, OSError):
      return
    if msg is None:
      return
    try:
      value = fn(*msg)
      conn.send(("ok", value))
    except BaseException as e:  # the caller gets the failure as data, the worker lives on
      conn.send(("error", f"{type(e).__name__}: {e}\n{traceback.format_exc(limit=3)}"))


_PACKAGE_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
_TMP_PREFIX = "maxnorm_worker_"


def _pid_alive(pid: int) -> bool:
  try:
    os.kill(pid, 0)
  except ProcessLookupError:
    return False
  except PermissionError:
    return True
  return True


def remove_stale_folders(tmp: str | None = None) -> list[str]:
  """Removes this user's `maxnorm_worker_<pid>_*` folders whose owner process <pid> is gone (a
  SIGKILLed trainer cannot clean up; its workers die with it); returns the folders removed."""
  tmp = tmp or tempfile.gettempdir()
  removed = []
  try:
    names = os.listdir(tmp)
  except OSError:
    return removed
  for name in names:
    if not name.startswith(_TMP_PREFIX):
      continue
    owner = name[len(_TMP_PREFIX) :].split("_", 1)[0]
    path = os.path.join(tmp, name)
    try:
      if not owner.isdigit() or os.stat(path).st_uid != os.getuid() or _pid_alive(int(owner)):
        continue
    except OSError:
      continue
    shutil.rmtree(path, ignore_errors=True)
    removed.append(path)
  return removed


class WorkerProcess:
  """One child interpreter running `fn` (a picklable, importable function) on request.

  The child is a fresh `python -c` process (not a fork, so a parent holding JAX threads is safe,
  and not multiprocessing's spawn, so the caller's __main__ is never re-imported). It is killed by
  the kernel if this process dies. `memory_mb` caps its address space (None: no cap).
  """

  def __init__(self, fn: Callable[..., Any], warmup: Callable[[], Any] | None = None, memory_mb: int | None = None):
    parent_sock, child_sock = socket.socketpair()
    env = dict(os.environ)
    # The child imports `fn` by name: give it this package and every folder this process imports from.
    paths = [_PACKAGE_ROOT] + [p for p in sys.path if p and os.path.isdir(p)]
    env["PYTHONPATH"] = os.pathsep.join(dict.fromkeys(paths))
    # The child's temporary files (sandbox folders included) live in a folder of its own, which
    # kill() removes: a child killed mid-run cannot clean up after itself.
    # Named after this process, so that a later run can remove it if this one is SIGKILLed.
    self.tmpdir = tempfile.mkdtemp(prefix=f"{_TMP_PREFIX}{os.getpid()}_")
    env["TMPDIR"] = self.tmpdir
    fd = child_sock.fileno()
    self.process = subprocess.Popen(
      [sys.executable, "-c", f"from maxnorm_jax.rewards.worker import _entry; _entry({fd}, {memory_mb!r})"],
      pass_fds=(fd,),
      env=env,
      stdin=subprocess.DEVNULL,
    )
    child_sock.close()
    self._conn = mpc.Connection(parent_sock.detach())
    self._conn.send((fn, warmup))
    self.ready = False

  def wait_ready(self, timeout_s: float = 120.0) -> bool:
    """Blocks until the child has imported and warmed up (True), died or timed out (False)."""
    if self.ready:
      return True
    try:
      if self._conn.poll(timeout_s):
        self.ready = self._conn.recv()[0] == "ready"
    except (EOFError, OSError):
      self.ready = False
    return self.ready

  @property
  def conn(self) -> mpc.Connection:
    return self._conn

  def send(self, args: tuple) -> None:
    self._conn.send(args)

  def alive(self) -> bool:
    return self.process.poll() is None

  def kill(self) -> None:
    """SIGKILLs the child, reaps it and removes its temporary folder."""
    if self.process.poll() is None:
      self.process.kill()
    self.process.wait()
    self._conn.close()
    shutil.rmtree(self.tmpdir, ignore_errors=True)

  def close(self) -> None:
    """Asks the child to exit; kills it if it does not within a second."""
    try:
      self._conn.send(None)
      self.process.wait(timeout=1)
    except (OSError, ValueError, subprocess.TimeoutExpired):
      pass
    self.kill()


class KillableWorker:
  """Calls `fn(*args)` in a child process with a hard wall-clock deadline.

  `call(args, timeout_s)` returns ("ok", value), ("error", text) when fn raised, ("timeout", None)
  when the deadline passed (the child is killed and a fresh one started on the next call) or
  ("crash", None) when the child died. Thread-safe: calls are serialised.
  """

  def __init__(self, fn: Callable[..., Any], warmup: Callable[[], Any] | None = None):
    self._fn = fn
    self._warmup = warmup
    self._worker: WorkerProcess | None = None
    self._lock = threading.Lock()
    self.restarts = 0

  def _ensure(self) -> WorkerProcess:
    if self._worker is None or not self._worker.alive():
      if self._worker is not None:
        self._worker.kill()
        self.restarts += 1
      self._worker = WorkerProcess(self._fn, self._warmup)
      if not self._worker.wait_ready():
        raise RuntimeError("verifier worker process failed to start")
    return self._worker

  def start(self) -> None:
    """Starts the child now (otherwise the first call does)."""
    with self._lock:
      self._ensure()

  def call(self, args: tuple, timeout_s: float) -> tuple[str, Any]:
    with self._lock:
      worker = self._ensure()
      try:
        worker.send(args)
        if not worker.conn.poll(timeout_s):
          worker.kill()
          self._worker = None
          self.restarts += 1
          return "timeout", None
        return worker.conn.recv()
      except (EOFError, OSError, BrokenPipeError):
        worker.kill()
        self._worker = None
        self.restarts += 1
        return "crash", None

  def close(self) -> None:
    with self._lock:
      if self._worker is not None:
        self._worker.close()
        self._worker = None

  def __del__(self):  # best effort; explicit close() is the contract
    try:
      if self._worker is not None:
        self._worker.kill()
    except Exception:
      pass
