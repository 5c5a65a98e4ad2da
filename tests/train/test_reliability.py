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
  return types.SimpleNamespace(pool=pool, preemption=PreemptionFlag(install=False), first_rejection=None)


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


def test_a_mostly_rejected_batch_is_reported_loudly_or_stops(caplog):
  import logging

  from trainer_helpers import runlocal_config

  from maxnorm_jax.train.loop import _check_rejections

  c = runlocal_config()  # 4 prompts x 4 samples
  with caplog.at_level(logging.WARNING, logger="maxnorm_jax.train"):
    _check_rejections(c, 3, {"rejected": 8.0}, "{'rejected': 'error'}")  # 50%: not over the bound
    assert not caplog.records
    _check_rejections(c, 3, {"rejected": 12.0}, "{'rejected': 'error', 'error': 'KeyError'}")
  assert "step 3: 75% of the samples got no valid score" in caplog.records[0].getMessage()
  assert "the first rejection of the run: {'rejected': 'error', 'error': 'KeyError'}" in caplog.records[0].getMessage()
  c.reward.on_rejected = "stop"
  with pytest.raises(RuntimeError, match="75% of the samples got no valid score.*on_rejected='stop'"):
    _check_rejections(c, 3, {"rejected": 12.0}, "x")


def test_non_finite_updates_are_logged_or_stop(caplog):
  import logging

  from trainer_helpers import runlocal_config

  from maxnorm_jax.train.loop import _check_nonfinite

  c = runlocal_config()
  with caplog.at_level(logging.WARNING, logger="maxnorm_jax.train"):
    _check_nonfinite(c, 5, {"nonfinite_updates": 0.0})
    _check_nonfinite(c, 5, {"nonfinite_updates": 1.0})
  assert [r.getMessage() for r in caplog.records] == [
    "step 5: 1 of 2 updates had a non-finite loss or gradient norm and were skipped (train.on_nonfinite='skip')"
  ]
  c.train.on_nonfinite = "stop"
  with pytest.raises(FloatingPointError, match="step 5: 1 of 2 updates had a non-finite loss"):
    _check_nonfinite(c, 5, {"nonfinite_updates": 1.0})


def test_hf_paths_stay_inside_the_hf_home(tmp_path, monkeypatch):
  """Issue 12.9: hf://../../.. and hf:///etc resolved outside $MAXNORM_HF_HOME."""
  from maxnorm_jax.train.loop import HF_HOME_ENV, resolve_path

  home = tmp_path / "hf"
  (home / "org" / "model").mkdir(parents=True)
  (tmp_path / "outside").mkdir()
  os_link = home / "org" / "escape"
  os_link.symlink_to(tmp_path / "outside")
  monkeypatch.setenv(HF_HOME_ENV, str(home))
  assert resolve_path("hf://org/model", "model.path") == str(home / "org" / "model")
  for bad in ("hf://../../..", "hf:///etc", "hf://org/../../outside", "hf://org/escape", "hf://"):
    with pytest.raises(ValueError, match=r"config.model.path: .* names a folder outside \$MAXNORM_HF_HOME"):
      resolve_path(bad, "model.path")


def test_index_weight_map_names_are_plain_file_names(tmp_path):
  import json

  from maxnorm_jax.models import hf

  (tmp_path / hf.INDEX_FILE).write_text(json.dumps({"weight_map": {"embed": "../../etc/passwd"}}))
  with pytest.raises(ValueError, match=r"weight_map names '../../etc/passwd' for tensor 'embed'; it must be a plain"):
    hf._checkpoint_files(str(tmp_path))
