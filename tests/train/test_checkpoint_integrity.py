"""Issue 12.2/12.3: a corrupted or unreadable newest checkpoint is skipped (one line saying why) and
the newest intact one restored; the bad one is moved aside, never used, and nothing intact is lost."""

import glob
import logging
import os

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from maxnorm_jax.train import fingerprint
from maxnorm_jax.train.checkpointing import Checkpointer, NoIntactCheckpoint


def _tree(seed):
  return {"w": jax.random.normal(jax.random.key(seed), (8192,)), "count": jnp.int32(seed)}


def _largest_data_file(workdir, step):
  files = glob.glob(os.path.join(workdir, "checkpoints", str(step), "state", "ocdbt.process_0", "d", "*"))
  return max(files, key=os.path.getsize)


def _flip_64_bytes(workdir, step):
  path = _largest_data_file(workdir, step)
  b = bytearray(open(path, "rb").read())
  k = len(b) // 2
  b[k : k + 64] = bytes(x ^ 0xFF for x in b[k : k + 64])
  open(path, "wb").write(b)


def _truncate(workdir, step):
  path = _largest_data_file(workdir, step)
  os.truncate(path, os.path.getsize(path) // 3)


def _drop_manifest(workdir, step):
  for path in glob.glob(
    os.path.join(workdir, "checkpoints", str(step), "state", "**", "manifest.ocdbt"), recursive=True
  ):
    os.remove(path)


def _saved(workdir, steps=(2, 4)):
  ck = Checkpointer(workdir, max_to_keep=2)
  for s in steps:
    ck.save(s, _tree(s), {"next": s}, config={"seed": 0})
  ck.wait()
  return ck


@pytest.mark.parametrize(
  "corrupt, why",
  [
    (_flip_64_bytes, "step 4: fingerprint mismatch in 1 arrays (first: ['w']): the files were altered"),
    (_truncate, "step 4: unreadable ("),
    (_drop_manifest, "step 4: unreadable ("),
  ],
)
def test_a_bad_newest_step_falls_back_to_the_newest_intact_one(tmp_path, caplog, corrupt, why):
  workdir = str(tmp_path)
  ck = _saved(workdir)
  corrupt(workdir, 4)
  with caplog.at_level(logging.WARNING, logger="maxnorm_jax.train"):
    restored = ck.restore_intact(_tree(0))
  assert restored.step == 2 and restored.data_state == {"next": 2} and restored.config == {"seed": 0}
  np.testing.assert_array_equal(np.asarray(restored.state["w"]), np.asarray(_tree(2)["w"]))
  assert len(restored.skipped) == 1 and restored.skipped[0].startswith(why)
  skipped_lines = [r.getMessage() for r in caplog.records if "skipped" in r.getMessage()]
  assert len(skipped_lines) == 1 and skipped_lines[0].startswith("checkpoint step 4 skipped: ")
  # The bad step is kept for inspection, out of orbax's way; the intact step survives new saves.
  assert os.listdir(os.path.join(workdir, "checkpoints_rejected")) == ["4"]
  assert ck.manager.all_steps() == [2]
  ck.save(4, _tree(5), {"next": 5}, config={"seed": 0})
  ck.wait()
  assert sorted(ck.manager.all_steps()) == [2, 4]
  assert ck.restore_intact(_tree(0)).step == 4
  ck.close()


def test_every_step_bad_is_an_error_naming_each(tmp_path):
  workdir = str(tmp_path)
  ck = _saved(workdir)
  _flip_64_bytes(workdir, 4)
  _truncate(workdir, 2)
  with pytest.raises(
    NoIntactCheckpoint, match=r"no intact checkpoint in .*step 4: fingerprint mismatch.*step 2: unreadable"
  ):
    ck.restore_intact(_tree(0))
  assert sorted(ck.manager.all_steps()) == [2, 4]  # nothing moved or deleted
  ck.close()


def test_non_finite_values_are_refused_even_with_a_matching_fingerprint(tmp_path):
  ck = Checkpointer(str(tmp_path), max_to_keep=3)
  ck.save(1, _tree(1), {}, config=None)
  ck.save(2, {"w": jnp.full((8192,), jnp.nan), "count": jnp.int32(2)}, {}, config=None)
  ck.wait()
  restored = ck.restore_intact(_tree(0))
  assert restored.step == 1
  assert restored.skipped == ["step 2: non-finite values in 1 arrays (first: ['w'])"]
  ck.close()


def test_altered_bytes_that_decode_to_a_nan_are_reported_as_altered():
  # flipped bytes in a data file may decode to a NaN (which byte lands where depends on orbax's
  # file layout); the stored fingerprint is what says the files were altered
  saved = _tree(4)
  altered = {"w": saved["w"].at[100].set(jnp.nan), "count": saved["count"]}
  assert fingerprint.check(altered, fingerprint.fingerprint(saved)) == (
    "fingerprint mismatch in 1 arrays (first: ['w']): the files were altered"
  )
  assert fingerprint.check(altered, None) == "non-finite values in 1 arrays (first: ['w'])"
  assert fingerprint.check(altered, fingerprint.fingerprint(altered)) == "non-finite values in 1 arrays (first: ['w'])"
