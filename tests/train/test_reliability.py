"""Issue 12: the trainer's side of the reliability fixes, tested on the parts (no compilation)."""

import threading
import time
import types

import numpy as np
import pytest

from maxnorm_jax.rewards import PoolHandle, Score, VerifierPool
from maxnorm_jax.train.checkpointing import PreemptionFlag
from maxnorm_jax.train.loop import Trainer


def _fake_trainer(pool):
  return types.SimpleNamespace(pool=pool, preemption=PreemptionFlag(install=False))


def test_a_dead_pool_is_an_error_in_the_trainer_not_a_hang():
  pool = VerifierPool(num_workers=1, timeout_s=5.0, warmup=None)
  fake = _fake_trainer(pool)
  handle = PoolHandle(2)
  pool._break("injected failure")
  t0 = time.monotonic()
  with pytest.raises(RuntimeError, match="verifier pool stopped with items unscored: injected failure"):
    Trainer._collect(fake, handle, np.arange(2), 2)
  assert time.monotonic() - t0 < 2
  pool.close()


def test_sigterm_interrupts_the_wait_for_rewards():
  pool = VerifierPool(num_workers=1, timeout_s=5.0, warmup=None)
  fake = _fake_trainer(pool)
  handle = PoolHandle(1)  # never scored
  threading.Timer(0.2, fake.preemption.set).start()
  t0 = time.monotonic()
  with pytest.raises(InterruptedError):
    Trainer._collect(fake, handle, np.arange(1), 1, interruptible=True)
  assert time.monotonic() - t0 < 2
  handle._set(0, Score(1.0))
  rewards, valid = Trainer._collect(fake, handle, np.arange(1), 1)
  assert rewards.tolist() == [1.0] and valid.tolist() == [True]
  pool.close()
