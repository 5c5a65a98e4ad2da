"""VerifierPool: ordered results, concurrency, hung and dead workers replaced, bad rewards rejected."""

import math
import os
import time

import numpy as np
import pytest
from rewards_pool_helpers import deadline_of, hostile_reward, nan_reward, slow_or_dead

from maxnorm_jax.rewards import PoolHandle, VerifierPool, detect_mode


@pytest.fixture(scope="module")
def builtin_pool():
  pool = VerifierPool(num_workers=2, timeout_s=lambda record: 1.5 if record["task"] == "math" else 10.0)
  assert pool.wait_ready(120)
  yield pool
  pool.close()


@pytest.fixture(scope="module")
def helper_pool():
  pool = VerifierPool(num_workers=2, score_fn=slow_or_dead, timeout_s=1.0, warmup=None)
  assert pool.wait_ready(120)
  yield pool
  pool.close()


def test_builtin_records_in_order(builtin_pool):
  items = [
    ("19", {"task": "arith", "answer": "19"}),
    (r"\boxed{\frac{2}{4}}", {"task": "math", "answer": "1/2"}),
    ("124", {"task": "arith_digits", "answer": "123"}),
    (r"\boxed{\frac{1}{2^{98}}}", {"task": "math", "answer": r"\frac{1}{2^{99}}"}),
    (
      "```python\nprint(int(input()) * 2)\n```",
      {"task": "code", "answer": "", "tests": [{"input": "3", "output": "6"}, {"input": "4", "output": "9"}]},
    ),
    ("18", {"task": "arith", "answer": "19"}),
  ]
  handle = builtin_pool.submit(items)
  scores = handle.result(timeout=60)
  assert [s.reward for s in scores] == pytest.approx([1.0, 1.0, 2 / 3, 0.0, 0.5, 0.0])
  assert [s.resolution for s in scores] == pytest.approx([1.0, 1.0, 1 / 3, 1.0, 0.5, 1.0])
  assert scores[3].info["exact"] is True
  rewards, valid, resolution = handle.arrays()
  assert rewards.dtype == np.float32 and valid.all() and resolution[2] == pytest.approx(1 / 3)


def test_hanging_math_item_costs_its_deadline_and_worker_is_replaced(builtin_pool):
  replaced = builtin_pool.replaced
  t0 = time.monotonic()
  handle = builtin_pool.submit(
    [
      (r"\boxed{2^{2^{2^{2^{2^{2}}}}}}", {"task": "math", "answer": "1"}),
      ("7", {"task": "arith", "answer": "7"}),
      (r"\boxed{3}", {"task": "math", "answer": "3"}),
    ]
  )
  scores = handle.result(timeout=30)
  assert time.monotonic() - t0 < 6.0
  assert scores[0].reward == 0.0 and scores[0].info["timeout"] is True
  assert [s.reward for s in scores[1:]] == [1.0, 1.0]
  deadline = time.monotonic() + 5
  while builtin_pool.replaced == replaced and time.monotonic() < deadline:
    time.sleep(0.01)
  assert builtin_pool.replaced == replaced + 1


def test_submit_returns_at_once_and_batches_overlap(helper_pool):
  t0 = time.monotonic()
  h1 = helper_pool.submit([("x", {"reward": 0.5})] * 4)
  h2 = helper_pool.submit([("y", {"reward": 0.25})] * 3)
  assert time.monotonic() - t0 < 0.5
  assert [s.reward for s in h2.result(30)] == [0.25] * 3
  assert [s.reward for s in h1.result(30)] == [0.5] * 4
  assert h1.done() and h2.done()


def test_hung_and_dead_workers_are_replaced(helper_pool):
  replaced = helper_pool.replaced
  timeouts, crashes = helper_pool.timeouts, helper_pool.crashes

  before = helper_pool.worker_tmpdirs()
  assert len(before) == helper_pool.num_workers == 2 and all(os.path.isdir(d) for d in before)
  items = [
    ("hang", {"reward": 1.0}),
    ("die", {"reward": 1.0}),
    ("ok", {"reward": 0.75}),
    ("ok", {"reward": 1.0}),
    ("hang", {"reward": 1.0}),
    ("ok", {"reward": 0.0}),
  ]
  t0 = time.monotonic()
  scores = helper_pool.submit(items).result(timeout=60)
  assert time.monotonic() - t0 < 15.0
  assert scores[0].info["timeout"] is True and scores[4].info["timeout"] is True
  assert scores[1].info["crash"] == "worker died"
  assert [s.reward for s in scores] == [0.0, 0.0, 0.75, 1.0, 0.0, 0.0]
  # A verifier that timed out or died is no verdict: those items leave the group (issue 12.6).
  assert [s.valid for s in scores] == [False, False, True, True, False, True]
  assert (helper_pool.timeouts - timeouts, helper_pool.crashes - crashes) == (2, 1)
  deadline = time.monotonic() + 5
  while helper_pool.replaced < replaced + 3 and time.monotonic() < deadline:
    time.sleep(0.01)
  assert helper_pool.replaced == replaced + 3
  assert helper_pool.score([("ok", {"reward": 0.5})], timeout=30)[0].reward == 0.5
  after = helper_pool.worker_tmpdirs()
  assert len(after) == 2 and set(after) != set(before)  # replaced workers have their own folders


def test_bad_user_rewards_are_rejected_and_counted():
  with VerifierPool(num_workers=1, score_fn=nan_reward, timeout_s=5.0, warmup=None) as pool:
    scores = pool.score([("nan", {}), ("ok", {}), ("inf", {}), ("big", {}), ("raise", {})], timeout=60)
    assert [s.valid for s in scores] == [False, True, False, False, False]
    assert [s.info.get("rejected") for s in scores] == ["nan", None, "inf", "out_of_range", "error"]
    assert scores[1].reward == 0.25 and not any(math.isnan(s.reward) for s in scores)
    assert pool.rejected.counts() == {"nan": 1, "inf": 1, "out_of_range": 1, "error": 1}
    assert "user function failed" in scores[4].info["error"]


def test_empty_batch_and_closed_pool():
  pool = VerifierPool(num_workers=1, score_fn=slow_or_dead, timeout_s=1.0, warmup=None)
  assert pool.submit([]).result(timeout=1) == []
  pool.close()
  with pytest.raises(RuntimeError, match="closed"):
    pool.submit([("ok", {"reward": 1.0})])


def _processes_with_cmdline(cmdline: bytes):
  """Host pids whose command line is exactly `cmdline` (NUL-separated arguments)."""
  pids = []
  for name in os.listdir("/proc"):
    if name.isdigit():
      try:
        with open(f"/proc/{name}/cmdline", "rb") as f:
          if f.read().rstrip(b"\0") == cmdline:
            pids.append(int(name))
      except OSError:
        continue
  return pids


@pytest.mark.skipif(detect_mode() != "root", reason="needs the root-mode sandbox")
def test_killing_a_worker_mid_sandbox_takes_the_sandbox_with_it():
  record = {"task": "code", "answer": "", "tests": [{"input": "", "output": "x"}]}
  seconds = f"30.{os.getpid()}{int(time.time() * 1000) % 100000}"
  program = f"import os\nos.execv('/bin/sleep', ['sleep', '{seconds}'])"
  marker = b"sleep\0" + seconds.encode()
  with VerifierPool(num_workers=1, timeout_s=4.0) as pool:
    assert pool.wait_ready(120)
    worker_tmp = pool.worker_tmpdirs()[0]
    handle = pool.submit([(f"```python\n{program}\n```", record)])
    deadline = time.monotonic() + 3.8
    while not _processes_with_cmdline(marker) and time.monotonic() < deadline:
      time.sleep(0.02)
    assert _processes_with_cmdline(marker)  # the sandboxed program is running
    assert any(n.startswith("maxnorm_sandbox_") for n in os.listdir(worker_tmp))
    score = handle.result(timeout=30)[0]
    assert score.info["timeout"] is True
    deadline = time.monotonic() + 5
    while _processes_with_cmdline(marker) and time.monotonic() < deadline:
      time.sleep(0.05)
    assert _processes_with_cmdline(marker) == []
    # The killed worker's temporary folder, its sandbox folder inside, went with it.
    deadline = time.monotonic() + 5
    while os.path.exists(worker_tmp) and time.monotonic() < deadline:
      time.sleep(0.05)
    assert not os.path.exists(worker_tmp)


def test_workers_that_cannot_start_break_the_pool_loudly():
  import sys

  pool = VerifierPool(num_workers=1, score_fn=slow_or_dead, timeout_s=1.0, warmup=sys.exit)
  try:
    handle = pool.submit([("ok", {"reward": 1.0})] * 2)
    scores = handle.result(timeout=60)
    assert [s.valid for s in scores] == [False, False]
    assert "died before they were ready" in scores[0].info["error"]
    assert pool.broken and not pool.wait_ready(1)
    with pytest.raises(RuntimeError, match="broken"):
      pool.submit([("ok", {"reward": 1.0})])
  finally:
    pool.close()


def test_hostile_items_and_deadlines_do_not_stop_the_pool():
  """Issue 12.1: each of these killed the dispatcher thread, after which every wait hung."""
  with VerifierPool(num_workers=1, score_fn=hostile_reward, timeout_s=deadline_of, warmup=None) as pool:
    items = [
      ("ok", {"deadline": math.inf}),
      ("ok", {"deadline": 2.0**31}),
      ("ok", {"deadline": -1}),
      ("ok", {"deadline": "soon"}),
      ("huge", {}),
      ("badinfo", {}),
      ("string", {}),
      ("ok", {}),
    ]
    handle = pool.submit(items)
    pool.wait(handle)
    scores = handle.result(0)
    assert [s.valid for s in scores] == [False] * 7 + [True]
    assert all("deadline must be a finite number" in s.info["error"] for s in scores[:3])
    assert "must be a number of seconds" in scores[3].info["error"]
    assert [s.info["rejected"] for s in scores[4:7]] == ["out_of_range", "info", "type"]
    assert scores[7].reward == 0.5 and pool.alive()
    assert pool.score([("ok", {})], timeout=30)[0].reward == 0.5
  with pytest.raises(ValueError, match="finite number of seconds"):
    VerifierPool(num_workers=1, score_fn=hostile_reward, timeout_s=math.inf, warmup=None)


def test_a_failed_dispatcher_breaks_the_pool_and_waits_end():
  pool = VerifierPool(num_workers=1, score_fn=slow_or_dead, timeout_s=5.0, warmup=None)
  try:
    assert pool.wait_ready(60)

    def boom():
      raise MemoryError("injected")

    pool._dispatch = boom  # the next dispatcher iteration fails
    handle = pool.submit([("ok", {"reward": 1.0})] * 2)
    t0 = time.monotonic()
    pool.wait(handle)  # settled by the break, not left hanging
    assert time.monotonic() - t0 < 5
    assert [s.valid for s in handle.result(0)] == [False, False]
    assert "dispatcher thread failed: MemoryError: injected" in handle.result(0)[0].info["error"]
    assert not pool.alive()
    orphan = PoolHandle(1)  # an item the dead pool will never score
    with pytest.raises(RuntimeError, match="verifier pool stopped with items unscored: the dispatcher"):
      pool.wait(orphan, poll_s=0.01)
    with pytest.raises(RuntimeError, match="broken"):
      pool.submit([("ok", {"reward": 1.0})])
  finally:
    pool.close()


def test_wait_is_interruptible(helper_pool):
  handle = helper_pool.submit([("hang", {"reward": 1.0})])
  t0 = time.monotonic()
  with pytest.raises(InterruptedError):
    helper_pool.wait(handle, poll_s=0.01, interrupted=lambda: time.monotonic() - t0 > 0.1)
  assert time.monotonic() - t0 < 0.9
  helper_pool.wait(handle)
  assert handle.result(0)[0].info["timeout"] is True


def test_verifiers_registered_in_the_parent_reach_the_workers_or_are_refused(monkeypatch):
  """Issue 12.5: a TASK_VERIFIERS entry added in the parent was invisible to the fresh workers."""
  from rewards_pool_helpers import ConstantVerifier

  from maxnorm_jax.rewards import TASK_VERIFIERS

  monkeypatch.setitem(TASK_VERIFIERS, "const", ConstantVerifier)
  with VerifierPool(num_workers=1, timeout_s=5.0, warmup=None) as pool:
    score = pool.score([("anything", {"task": "const"})], timeout=60)[0]
    assert score.valid and score.reward == 0.625 and score.info == {"user": True}

  class Local:  # not importable by a worker
    pass

  monkeypatch.setitem(TASK_VERIFIERS, "local", Local)
  with pytest.raises(ValueError, match=r"TASK_VERIFIERS\['local'\] = .* cannot import it"):
    VerifierPool(num_workers=1, timeout_s=5.0, warmup=None)


def test_a_worker_past_its_memory_cap_rejects_the_item_and_the_pool_goes_on():
  """Issue 12.9: verifier workers had no memory limit (one 1 MB input reached 610 MB)."""
  from rewards_pool_helpers import allocate

  with VerifierPool(num_workers=1, score_fn=allocate, timeout_s=20.0, warmup=None, memory_mb=400) as pool:
    big, small = pool.score([("x", {"mb": 800}), ("x", {"mb": 10})], timeout=60)
    assert not big.valid and "MemoryError" in big.info["error"]
    assert small.valid and small.reward == 0.5


def test_folders_of_sigkilled_trainers_are_removed(tmp_path):
  """Issue 12.9: each SIGKILLed trainer left one empty maxnorm_worker_* folder per worker."""
  import subprocess
  import tempfile

  from maxnorm_jax.rewards.worker import remove_stale_folders

  dead = subprocess.Popen(["true"])
  dead.wait()
  tmp = tempfile.gettempdir()
  stale = tempfile.mkdtemp(prefix=f"maxnorm_worker_{dead.pid}_")
  live = tempfile.mkdtemp(prefix=f"maxnorm_worker_{os.getpid()}_")
  try:
    removed = remove_stale_folders(tmp)
    assert stale in removed and not os.path.exists(stale)
    assert os.path.isdir(live) and live not in removed
    with VerifierPool(num_workers=1, score_fn=slow_or_dead, timeout_s=5.0, warmup=None) as pool:
      assert os.path.basename(pool._slots[0].worker.tmpdir).startswith(f"maxnorm_worker_{os.getpid()}_")
  finally:
    os.rmdir(live)
