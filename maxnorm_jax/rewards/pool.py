"""VerifierPool: N worker processes score a batch while the device works.

    pool = VerifierPool(num_workers=2)
    handle = pool.submit([(completion, record), ...])   # returns at once
    ...                                                  # device: log-prob passes
    scores = handle.result()                             # list[Score], in submission order

A dispatcher thread hands items to idle workers one at a time. Each item has a hard wall-clock
deadline (`timeout_s`: seconds, or a function of the record; by default the built-in task's);
a worker past it is killed and replaced, and the item gets an invalid score (valid=False,
info["timeout"]; counted in `pool.timeouts`). A worker that dies (segfault, OOM kill, os._exit) is
replaced and its item gets an invalid score with info["crash"] (counted in `pool.crashes`): a
verifier that could not answer says nothing about the completion, so it must leave the group
rather than enter it as a zero. What a scoring function returns goes through `check_reward`:
NaN, infinite or out-of-[0, 1] rewards, and functions that raise, give valid=False scores,
counted in `pool.rejected`.

No item can stop the dispatcher: a deadline that is not a finite number in (0, MAX_DEADLINE_S]
rejects that item, and any unexpected error of the dispatcher thread breaks the pool (`broken`
says why, every pending item gets an invalid score, `submit` raises), so a caller waiting on a
handle with `wait(pool, ...)` gets an error instead of blocking forever.
"""

from __future__ import annotations

import collections
import functools
import math
import multiprocessing.connection as mpc
import threading
import time
from typing import Any, Callable, Sequence

import numpy as np

from maxnorm_jax.rewards import builtin
from maxnorm_jax.rewards.score import REJECTED, RejectionCounter, Score, check_reward
from maxnorm_jax.rewards.worker import WorkerProcess, remove_stale_folders

#: Consecutive worker deaths before "ready" after which the pool gives up (no respawn loop).
MAX_START_FAILURES = 3
#: Each worker's default address-space cap (MiB): a verifier blowing up on one input gets MemoryError.
DEFAULT_WORKER_MEMORY_MB = 4096
#: The longest per-item deadline the pool accepts (seconds); longer ones reject the item.
MAX_DEADLINE_S = 3600.0
#: The longest single wait of the dispatcher (seconds), far below what `mpc.wait` accepts.
_MAX_POLL_S = 60.0


def check_deadline(value: Any) -> float:
  """`value` as a deadline in seconds; ValueError unless a finite number in (0, MAX_DEADLINE_S]."""
  try:
    seconds = float(value)
  except (TypeError, ValueError, OverflowError):
    raise ValueError(f"verifier deadline must be a number of seconds, got {value!r}") from None
  if not (math.isfinite(seconds) and 0.0 < seconds <= MAX_DEADLINE_S):
    raise ValueError(f"verifier deadline must be a finite number of seconds in (0, {MAX_DEADLINE_S:g}], got {value!r}")
  return seconds


class PoolHandle:
  """The pending result of one `submit`: `result()` blocks until every item is scored."""

  def __init__(self, n: int):
    self._scores: list[Score | None] = [None] * n
    self._left = n
    self._event = threading.Event()
    self._lock = threading.Lock()
    self.submitted_at = time.monotonic()
    self.finished_at: float | None = None
    if n == 0:
      self._finish()

  def _finish(self) -> None:
    self.finished_at = time.monotonic()
    self._event.set()

  def _set(self, index: int, score: Score) -> None:
    with self._lock:
      if self._scores[index] is not None:  # already scored (a broken pool settles what is left)
        return
      self._scores[index] = score
      self._left -= 1
      if self._left == 0:
        self._finish()

  def done(self) -> bool:
    """True when every item has its score."""
    return self._event.is_set()

  def result(self, timeout: float | None = None) -> list[Score]:
    """The scores in submission order; raises TimeoutError if not done within `timeout`."""
    if not self._event.wait(timeout):
      raise TimeoutError("verifier pool batch not finished")
    return list(self._scores)  # type: ignore[arg-type]

  def arrays(self, timeout: float | None = None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(rewards float32, valid bool, resolution float32) arrays; rejected items have valid False."""
    scores = self.result(timeout)
    return (
      np.array([s.reward for s in scores], np.float32),
      np.array([s.valid for s in scores], bool),
      np.array([s.resolution for s in scores], np.float32),
    )


class _Slot:
  """One worker process and what it is doing."""

  def __init__(self, fn, warmup, memory_mb=None):
    self.worker = WorkerProcess(fn, warmup, memory_mb)
    self.ready = False
    self.job: tuple[PoolHandle, int, dict] | None = None
    self.deadline = 0.0
    self.timeout_s = 0.0


class VerifierPool:
  """A pool of killable worker processes scoring (completion, record) items concurrently.

  Args:
    num_workers: worker processes.
    score_fn: importable function (completion, record) -> Score | float | dict; default
      `builtin.score_record` (the built-in tasks).
    timeout_s: per-item wall-clock deadline: a number, or a function of the record; default
      `builtin.deadline_for`.
    warmup: importable function each worker runs once at start (default: import math-verify).
    memory_mb: address-space cap of each worker (MemoryError past it: the item is rejected);
      None: no cap.
  """

  def __init__(
    self,
    num_workers: int = 2,
    score_fn: Callable[[str, Any], Any] = builtin.score_record,
    timeout_s: float | Callable[[Any], float] | None = None,
    warmup: Callable[[], Any] | None = builtin.warmup,
    memory_mb: int | None = DEFAULT_WORKER_MEMORY_MB,
  ):
    if num_workers < 1:
      raise ValueError("num_workers must be >= 1")
    if score_fn is builtin.score_record:
      extra = builtin.importable_verifiers()  # ValueError when a worker could not import one
      if extra:
        warmup = functools.partial(builtin.install_then_warmup, extra, warmup)
    self._fn = score_fn
    self._warmup = warmup
    self._memory_mb = memory_mb
    remove_stale_folders()
    self._timeout = builtin.deadline_for if timeout_s is None else timeout_s
    if not callable(self._timeout):
      check_deadline(self._timeout)
    self.rejected = RejectionCounter()
    self.replaced = 0
    self.timeouts = 0
    self.crashes = 0
    self.broken: str | None = None
    self._start_failures = 0
    self._pending: collections.deque = collections.deque()
    self._lock = threading.Lock()
    self._wake_r, self._wake_w = mpc.Pipe(duplex=False)
    self._closed = False
    self._slots = [_Slot(score_fn, warmup, memory_mb) for _ in range(num_workers)]
    self._thread = threading.Thread(target=self._loop, name="verifier-pool", daemon=True)
    self._thread.start()

  @property
  def num_workers(self) -> int:
    return len(self._slots)

  def alive(self) -> bool:
    """False once the pool is closed or broken (its dispatcher thread gone)."""
    return not self._closed and self.broken is None and self._thread.is_alive()

  def wait(self, handle: PoolHandle, poll_s: float = 0.2, interrupted: Callable[[], bool] | None = None) -> None:
    """Blocks until `handle` is done; RuntimeError as soon as the pool is broken or closed, and
    InterruptedError when `interrupted()` (e.g. a SIGTERM flag) turns True, so that no caller waits
    on a dead pool forever."""
    while not handle.done():
      if handle._event.wait(poll_s):
        return
      if not self.alive():
        if handle.done():
          return
        raise RuntimeError(f"verifier pool stopped with items unscored: {self.broken or 'closed'}")
      if interrupted is not None and interrupted():
        raise InterruptedError("interrupted while waiting for the verifier pool")

  def worker_tmpdirs(self) -> tuple[str, ...]:
    """The private temporary folder of each current worker (a replaced worker gets a new one)."""
    return tuple(slot.worker.tmpdir for slot in self._slots)

  def _deadline(self, record: Any) -> float:
    return check_deadline(self._timeout(record) if callable(self._timeout) else self._timeout)

  def submit(self, items: Sequence[tuple[str, Any]]) -> PoolHandle:
    """Queues (completion, record) items; returns a handle at once."""
    if self._closed:
      raise RuntimeError("verifier pool is closed")
    if self.broken:
      raise RuntimeError(f"verifier pool is broken: {self.broken}")
    handle = PoolHandle(len(items))
    with self._lock:
      for i, (completion, record) in enumerate(items):
        self._pending.append((handle, i, (completion, record)))
    self._wake_w.send_bytes(b"w")
    return handle

  def score(self, items: Sequence[tuple[str, Any]], timeout: float | None = None) -> list[Score]:
    """submit(items).result(timeout)."""
    return self.submit(items).result(timeout)

  def wait_ready(self, timeout: float = 120.0) -> bool:
    """Blocks until every worker has started and warmed up (optional; for benchmarks)."""
    end = time.monotonic() + timeout
    while time.monotonic() < end and not self.broken:
      if all(s.ready for s in self._slots):
        return True
      time.sleep(0.01)
    return False

  # --- dispatcher thread -------------------------------------------------------------------

  def _replace(self, i: int) -> None:
    self._slots[i].worker.kill()
    self._slots[i] = _Slot(self._fn, self._warmup, self._memory_mb)
    self.replaced += 1

  def _finish(self, slot: _Slot, score: Score) -> None:
    handle, index, _ = slot.job  # type: ignore[misc]
    slot.job = None
    handle._set(index, score)

  def _dispatch(self) -> None:
    for slot in self._slots:
      if slot.ready and slot.job is None:
        with self._lock:
          if not self._pending:
            return
          job = self._pending.popleft()
        try:
          timeout_s = self._deadline(job[2][1])
        except Exception as e:  # a bad deadline rejects its item, not the pool
          self.rejected.add("error")
          REJECTED.add("error")
          job[0]._set(job[1], Score(0.0, 1.0, {"rejected": "error", "error": f"{type(e).__name__}: {e}"}, valid=False))
          continue
        slot.job = job
        slot.timeout_s = timeout_s
        slot.deadline = time.monotonic() + slot.timeout_s
        try:
          slot.worker.send(job[2])
        except (OSError, ValueError):
          pass  # the dead worker shows up as EOF below

  def _loop(self) -> None:
    try:
      self._run()
    except BaseException as e:  # never leave callers waiting on a dead dispatcher
      self._break(f"the dispatcher thread failed: {type(e).__name__}: {e}")

  def _score_of(self, status: str, value: Any) -> Score:
    if status == "ok":
      try:
        return check_reward(value, self.rejected)
      except Exception as e:  # check_reward is total; this guards the dispatcher all the same
        self.rejected.add("error")
        REJECTED.add("error")
        return Score(0.0, 1.0, {"rejected": "error", "error": f"{type(e).__name__}: {e}"}, valid=False)
    self.rejected.add("error")
    REJECTED.add("error")
    return Score(0.0, 1.0, {"rejected": "error", "error": str(value)}, valid=False)

  def _run(self) -> None:
    while not self._closed and not self.broken:
      self._dispatch()
      now = time.monotonic()
      busy = [s.deadline - now for s in self._slots if s.job is not None]
      wait_s = min(_MAX_POLL_S, max(0.0, min(busy))) if busy else _MAX_POLL_S
      conns = [s.worker.conn for s in self._slots] + [self._wake_r]
      try:
        ready = mpc.wait(conns, timeout=wait_s)
      except OSError:
        ready = []
      if self._closed:
        return
      if self._wake_r in ready:
        while self._wake_r.poll():
          self._wake_r.recv_bytes()
      for i, slot in enumerate(list(self._slots)):
        if slot.worker.conn in ready:
          try:
            status, value = slot.worker.conn.recv()
          except (EOFError, OSError):
            if slot.job is not None:
              self.crashes += 1
              self._finish(slot, Score(0.0, 1.0, {"crash": "worker died", "worker_replaced": True}, valid=False))
            if not slot.ready:
              self._start_failures += 1
              if self._start_failures >= MAX_START_FAILURES:
                self._break(
                  f"{self._start_failures} worker processes died before they were ready "
                  "(is score_fn importable, does warmup work?)"
                )
                return
            self._replace(i)
            continue
          if status == "ready":
            slot.ready = True
            self._start_failures = 0
          elif slot.job is not None:
            self._finish(slot, self._score_of(status, value))
      now = time.monotonic()
      for i, slot in enumerate(list(self._slots)):
        if slot.job is not None and now >= slot.deadline:
          self.timeouts += 1
          info = {"timeout": True, "timeout_s": slot.timeout_s, "worker_replaced": True}
          self._finish(slot, Score(0.0, 1.0, info, valid=False))
          self._replace(i)

  def _break(self, why: str) -> None:
    """Gives up: every queued item gets an invalid score saying why; submit() raises from now on.
    The first reason is kept (killing the workers can make the dispatcher fail a second time)."""
    if not self.broken:
      self.broken = why
    for slot in self._slots:
      try:
        slot.worker.kill()
      except Exception:
        pass
    with self._lock:
      pending, self._pending = list(self._pending), collections.deque()
    for handle, index, _ in pending:
      self.rejected.add("error")
      handle._set(index, Score(0.0, 1.0, {"rejected": "error", "error": why}, valid=False))
    for slot in self._slots:
      if slot.job is not None and not slot.job[0].done():
        self.rejected.add("error")
        self._finish(slot, Score(0.0, 1.0, {"rejected": "error", "error": why}, valid=False))

  def close(self) -> None:
    """Stops the dispatcher and the workers; unfinished items score 0 with info["closed"]."""
    if self._closed:
      return
    self._closed = True
    try:
      self._wake_w.send_bytes(b"c")
    except OSError:
      pass
    self._thread.join(timeout=5)
    for slot in self._slots:
      if slot.job is not None:
        self._finish(slot, Score(0.0, 1.0, {"closed": True}, valid=False))
      slot.worker.close()
    with self._lock:
      while self._pending:
        handle, index, _ = self._pending.popleft()
        handle._set(index, Score(0.0, 1.0, {"closed": True}, valid=False))

  def __enter__(self):
    return self

  def __exit__(self, *exc):
    self.close()

  def __del__(self):
    try:
      self.close()
    except Exception:
      pass
