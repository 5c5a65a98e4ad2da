import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from maxnorm_jax.core import advantages, protocol


def test_gate_drops_sub_resolution_groups():
  r = np.array([[0.5, 0.5001, 0.4999, 0.5], [0.0, 0.0, 0.0, 1.0], [0.5, 0.51, 0.5, 0.5], [1.0] * 4])
  m = np.ones((4, 4), bool)
  out, valid = protocol.apply(r, m, delta_res=1e-2)
  np.testing.assert_array_equal(valid, [False, True, True, False])
  np.testing.assert_allclose(out, r, rtol=1e-6)
  _, valid_off = protocol.apply(r, m, gate=False)
  np.testing.assert_array_equal(valid_off, [True, True, True, True])
  _, valid_singleton = protocol.apply(r, np.eye(4, dtype=bool), gate=False)
  np.testing.assert_array_equal(valid_singleton, [False] * 4)


def test_binning_single_linkage_chains_and_cluster_means():
  r = np.array([[0.0, 0.006, 0.012, 0.5, 0.505, 1.0], [0.3, 0.3001, 0.3, 0.9, 0.9002, 0.0]], np.float32)
  m = np.ones_like(r, bool)
  m[1, 5] = False
  binned = np.asarray(protocol.binning(r, m, delta_res=1e-2))
  np.testing.assert_allclose(binned[0], [0.006, 0.006, 0.006, 0.5025, 0.5025, 1.0], rtol=1e-5)
  np.testing.assert_allclose(binned[1, :5], [0.30003333, 0.30003333, 0.30003333, 0.9001, 0.9001], rtol=1e-5)
  assert binned[1, 5] == 0.0  # masked entry returned unchanged
  out, valid = protocol.apply(r, m, binning=True)
  np.testing.assert_allclose(out, binned)
  np.testing.assert_array_equal(valid, [True, True])


@settings(max_examples=40, deadline=None)
@given(
  r=hnp.arrays(np.float32, (3, 8), elements=st.floats(0, 1, width=32)),
  m=hnp.arrays(np.bool_, (3, 8)),
)
def test_binning_properties(r, m):
  binned = np.asarray(protocol.binning(r, m, delta_res=0.05))
  for q in range(3):
    vals = np.sort(np.unique(binned[q][m[q]]))
    if len(vals) > 1:
      assert np.min(np.diff(vals)) >= 0.05 - 1e-6  # distinct clusters are credible gaps apart
    np.testing.assert_allclose(
      binned[q][m[q]].mean() if m[q].any() else 0, r[q][m[q]].mean() if m[q].any() else 0, atol=1e-5
    )
    order = np.argsort(r[q][m[q]], kind="stable")
    assert np.all(np.diff(binned[q][m[q]][order]) >= -1e-6)  # order is kept


def test_apply_to_card_gate_and_zero_group_skip():
  r = np.array([[0.5, 0.5001, 0.5, 0.5], [0, 0, 1, 1], [0.2] * 4, [0, 1, 0, 1]], np.float32)
  m = np.ones((4, 4), bool)
  r2, group_valid = protocol.apply(r, m)
  card = advantages.compute("rloo", r2, m)
  gated = protocol.apply_to_card(card, group_valid, zero_group="skip")
  np.testing.assert_array_equal(gated.valid, [False, True, False, True])
  np.testing.assert_array_equal(gated.kl_weight, [0, 1, 0, 1])
  np.testing.assert_array_equal(np.asarray(gated.advantages)[0], 0.0)
  kept = protocol.apply_to_card(advantages.compute("rloo", r2, m), np.ones(4, bool), zero_group="keep")
  np.testing.assert_array_equal(kept.kl_weight, [1, 1, 1, 1])  # the all-equal group stays in KL
  np.testing.assert_array_equal(kept.valid, [True, True, False, True])
  with pytest.raises(ValueError, match="zero_group must be one of"):
    protocol.apply_to_card(card, group_valid, zero_group="drop")
