import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from maxnorm_jax.core import advantages
from maxnorm_jax.core.cards import AdvantageCard
from maxnorm_jax.testing import numpy_reference as ref

P, G = 4, 8
THREE_OF_EIGHT = np.array([[1, 1, 1, 0, 0, 0, 0, 0]], np.float32)
STATELESS = [n for n in advantages.names() if n != "avspo"]


def test_names_are_the_design_registry():
  assert advantages.names() == sorted(
    [
      "grpo",
      "dr_grpo",
      "rloo",
      "reinforce_pp",
      "reinforce_pp_baseline",
      "maxnorm_rloo",
      "maxnorm_dr_grpo",
      "p90",
      "grpo_beta_comp",
      "gopo",
      "avspo",
      "f_grpo",
    ]
  )


@pytest.mark.parametrize(
  "name,params,pos,neg",
  [
    ("grpo", {}, 1.2076124, -0.7245674),
    ("rloo", {}, 0.7142857, -0.4285714),
    ("dr_grpo", {}, 0.625, -0.375),
    ("maxnorm_rloo", {"tau_res": 0.1}, 1.0, -0.6),
    ("maxnorm_dr_grpo", {"tau_res": 0.1}, 1.0, -0.6),
    ("gopo", {}, 2.0 - 4.0 / 7.0, 2.0 - 4.0 * 5.0 / 7.0),
    ("f_grpo", {}, 1.2076124 * 5 / 8, -0.7245674 * 5 / 8),
  ],
)
def test_hand_computed_reference_values(name, params, pos, neg):
  card = advantages.compute(name, THREE_OF_EIGHT, **params)
  np.testing.assert_allclose(card.advantages[0, :3], pos, rtol=1e-6)
  np.testing.assert_allclose(card.advantages[0, 3:], neg, rtol=1e-6)
  assert bool(card.valid[0])


def test_grpo_population_std_and_scale_field():
  card = advantages.compute("grpo", THREE_OF_EIGHT, std_ddof=0, eps=0.0)
  std = np.sqrt(3 / 8 * 5 / 8)
  np.testing.assert_allclose(card.scale, [std], rtol=1e-6)
  np.testing.assert_allclose(card.advantages[0, 0], 0.625 / std, rtol=1e-6)
  np.testing.assert_allclose(card.numerator[0, 0], 0.625, rtol=1e-6)


def test_maxnorm_scale_floor_is_tau_res():
  r = np.array([[0.5, 0.5, 0.5, 0.52]], np.float32)
  card = advantages.compute("maxnorm_rloo", r, tau_res=0.1)
  np.testing.assert_allclose(card.scale, [0.1], rtol=1e-6)
  np.testing.assert_allclose(card.advantages[0, 3], 0.02 / 0.1, rtol=1e-4)  # u = r - mean(others)


def test_p90_quantile_one_equals_maxnorm_rloo():
  rng = np.random.default_rng(0)
  r = rng.uniform(size=(P, G)).astype(np.float32)
  a = advantages.compute("p90", r, quantile=1.0).advantages
  b = advantages.compute("maxnorm_rloo", r).advantages
  np.testing.assert_allclose(a, b, rtol=1e-6)


def test_p90_matches_numpy_quantile():
  r = np.array([[0.0, 0.1, 0.2, 0.3, 0.5, 0.8, 0.9, 1.0]], np.float32)
  card = advantages.compute("p90", r)
  u = np.array([r[0, i] - np.delete(r[0], i).mean() for i in range(8)])
  np.testing.assert_allclose(card.scale, [np.quantile(np.abs(u), 0.9)], rtol=1e-5)


def test_gopo_ties():
  r = np.array([[1.0, 0.5, 0.5, 0.0]], np.float32)
  avg = advantages.compute("gopo", r).advantages[0]
  np.testing.assert_allclose(avg, [2.0, 0.0, 0.0, -2.0], atol=1e-6)
  arb = advantages.compute("gopo", r, ties="arbitrary").advantages[0]
  np.testing.assert_allclose(arb, [2.0, 2.0 - 4 / 3, 2.0 - 8 / 3, -2.0], atol=1e-6)
  with pytest.raises(ValueError, match="ties must be"):
    advantages.compute("gopo", r, ties="random")


def test_beta_comp_kl_weight():
  r = np.array([[1, 0, 0, 0], [1, 1, 0, 0], [0.51, 0.5, 0.5, 0.5], [0.3] * 4], np.float32)
  card = advantages.compute("grpo_beta_comp", r)
  np.testing.assert_allclose(card.kl_weight, ref.loop_kl_weight(r), rtol=1e-5)
  assert card.kl_weight[2] > 1.0  # the low-variance group has its KL raised
  assert card.kl_weight[1] == 1.0
  np.testing.assert_allclose(card.kl_weight, [1.0, 1.0, 10.0, 1.0])  # s = .5, .577, .005; s_ref .5


def test_reinforce_pp_whitening_and_token_weights():
  rng = np.random.default_rng(1)
  r = rng.uniform(size=(P, G)).astype(np.float32)
  card = advantages.compute("reinforce_pp_baseline", r)
  adv = np.asarray(card.advantages)
  np.testing.assert_allclose(adv.mean(), 0.0, atol=1e-6)
  np.testing.assert_allclose(adv.std(ddof=1), 1.0, atol=1e-4)  # std_ddof=1 by default
  population = np.asarray(advantages.compute("reinforce_pp_baseline", r, std_ddof=0).advantages)
  np.testing.assert_allclose(population.std(), 1.0, atol=1e-4)
  lengths = np.ones((P, G), np.float32)
  same = advantages.compute("reinforce_pp_baseline", r, lengths=lengths).advantages
  np.testing.assert_allclose(same, adv, rtol=1e-5)
  lengths[0] = 100.0
  weighted = np.asarray(advantages.compute("reinforce_pp_baseline", r, lengths=lengths).advantages)
  w = lengths.ravel() / lengths.sum()
  np.testing.assert_allclose((weighted.ravel() * w).sum(), 0.0, atol=1e-5)


def test_unknown_name_and_parameter_errors():
  with pytest.raises(ValueError, match="unknown advantage estimator 'grpoo'"):
    advantages.compute("grpoo", THREE_OF_EIGHT)
  with pytest.raises(TypeError, match="'rloo' got unknown parameter\\(s\\) \\['tau_res'\\]"):
    advantages.compute("rloo", THREE_OF_EIGHT, tau_res=0.1)
  with pytest.raises(ValueError, match="shape \\[P, G\\]"):
    advantages.compute("grpo", np.zeros(8))


@pytest.mark.parametrize("name", STATELESS)
def test_degenerate_groups_are_zero_and_invalid(name, compute_jit):
  r = np.array([[0.7] * 8, [1, 0, 0, 0, 0, 0, 0, 0], [1, 0, 1, 0, 1, 0, 1, 0], [5] * 8], np.float32)
  m = np.ones((P, G), bool)
  m[1, 1:] = False  # singleton
  m[3] = False  # empty
  card = compute_jit(name, r, m)
  chex.assert_shape([card.numerator, card.advantages], (P, G))
  chex.assert_shape([card.scale, card.kl_weight, card.valid], (P,))
  np.testing.assert_array_equal(card.valid, [False, False, True, False])
  np.testing.assert_array_equal(np.asarray(card.advantages)[[0, 1, 3]], 0.0)
  assert card.kl_weight[3] == 0.0
  assert np.all(np.isfinite(card.advantages)) and np.all(np.isfinite(card.scale))


@pytest.mark.parametrize("name", advantages.names())
@pytest.mark.parametrize("magnitude", [1e30, 1e-30])
def test_extreme_magnitudes_stay_finite(name, magnitude, compute_jit):
  rng = np.random.default_rng(2)
  r = (rng.integers(0, 3, size=(P, G)) * magnitude).astype(np.float32)
  card = compute_jit(name, r, np.ones((P, G), bool))
  for field in (card.numerator, card.scale, card.advantages, card.kl_weight):
    assert np.all(np.isfinite(np.asarray(field))), (name, magnitude)


@pytest.mark.parametrize("name", ref.LOOP_NAMES)
def test_matches_per_group_numpy_loop_on_ragged_groups(name, compute_jit):
  rng = np.random.default_rng(3)
  r = rng.integers(0, 5, size=(P, G)).astype(np.float32) / 4
  m = rng.uniform(size=(P, G)) < 0.75
  expected = ref.loop_advantages(name, r, m)
  np.testing.assert_allclose(compute_jit(name, r, m).advantages, expected, rtol=2e-5, atol=2e-6)


# Dyadic values: shifts and means are exact in float32, so invariances hold to rounding of 1/s.
rewards_st = hnp.arrays(np.float32, (P, G), elements=st.sampled_from([0.0, 0.25, 0.5, 0.5078125, 1.0, -3.0]))
masks_st = hnp.arrays(np.bool_, (P, G))
floats_st = hnp.arrays(
  np.float32,
  (P, G),
  elements=st.floats(-1e6, 1e6, width=32, allow_nan=False, allow_infinity=False),
)


@settings(max_examples=40, deadline=None)
@given(r=floats_st, m=masks_st)
def test_maxnorm_bounded_and_preserves_signs_ranks_ratios(r, m, compute_jit):
  for name in ("maxnorm_rloo", "maxnorm_dr_grpo"):
    card = compute_jit(name, r, m)
    c, u = np.asarray(card.advantages), np.asarray(card.numerator)
    assert np.all(np.abs(c) <= 1.0 + 1e-6)
    for q in np.flatnonzero(np.asarray(card.valid)):
      cq, uq = c[q][m[q]], u[q][m[q]]
      np.testing.assert_array_equal(np.sign(cq), np.sign(uq))
      np.testing.assert_array_equal(np.argsort(cq, kind="stable"), np.argsort(uq, kind="stable"))
      np.testing.assert_allclose(cq * float(card.scale[q]), uq, rtol=1e-5, atol=1e-6 * np.abs(uq).max())


@settings(max_examples=25, deadline=None)
@given(r=rewards_st, m=masks_st, shift=st.sampled_from([-2.0, 0.5, 3.0]))
def test_invariant_to_a_constant_added_to_a_group(r, m, shift, compute_jit):
  shifted = r.copy()
  shifted[1] += np.float32(shift)
  for name in ("grpo", "rloo", "dr_grpo", "maxnorm_rloo", "maxnorm_dr_grpo", "p90", "gopo", "grpo_beta_comp"):
    a = compute_jit(name, r, m).advantages
    b = compute_jit(name, shifted, m).advantages
    np.testing.assert_allclose(a, b, rtol=2e-4, atol=1e-5, err_msg=name)


@settings(max_examples=25, deadline=None)
@given(r=rewards_st, m=masks_st, seed=st.integers(0, 2**16))
def test_permutation_equivariant(r, m, seed, compute_jit):
  perm = np.random.default_rng(seed).permutation(G)
  for name in STATELESS:
    a = np.asarray(compute_jit(name, r, m).advantages)
    b = np.asarray(compute_jit(name, r[:, perm], m[:, perm]).advantages)
    if name == "gopo":
      continue  # average ties: equivariant; checked below with its default
    np.testing.assert_allclose(a[:, perm], b, atol=1e-5, err_msg=name)
  a = np.asarray(compute_jit("gopo", r, m).advantages)
  b = np.asarray(compute_jit("gopo", r[:, perm], m[:, perm]).advantages)
  np.testing.assert_allclose(a[:, perm], b, atol=1e-5)


@settings(max_examples=25, deadline=None)
@given(r=rewards_st, m=masks_st)
def test_masked_group_equals_the_group_alone(r, m, compute_jit):
  for name in ("grpo", "rloo", "dr_grpo", "maxnorm_rloo", "maxnorm_dr_grpo", "p90", "gopo", "f_grpo"):
    card = compute_jit(name, r, m)
    for q in range(P):
      alone = r[q][m[q]]
      if len(alone) == 0:
        continue
      solo = advantages.compute(name, alone[None, :]).advantages[0]
      np.testing.assert_allclose(np.asarray(card.advantages)[q][m[q]], solo, atol=1e-5, err_msg=name)


@settings(max_examples=40, deadline=None)
@given(r=floats_st, m=masks_st)
def test_all_outputs_finite_on_any_input(r, m, compute_jit):
  for name in advantages.names():
    card = compute_jit(name, r, m)
    chex.assert_tree_all_finite(card)


@settings(max_examples=30, deadline=None)
@given(
  r=hnp.arrays(np.float32, (P, G), elements=st.sampled_from([0.0, 1.0, 0.3, 0.7])),
  m=masks_st,
  tau=st.sampled_from([0.0, 0.2, 0.5, 0.9]),
)
def test_avspo_bound_and_reference(r, m, tau):
  state = advantages.initial_state("avspo").replace(tau_adapt=jnp.float32(tau))
  card = advantages.compute("avspo", r, m, state=state)
  adv = np.asarray(card.advantages)
  np.testing.assert_allclose(adv, ref.loop_avspo(r, m, tau), rtol=1e-4, atol=1e-5)
  n = m.sum(-1)
  collapsed = (n >= 2) & np.array([np.ptp(r[q][m[q]]) == 0 if n[q] else False for q in range(P)])
  acr = collapsed.sum() / max((n >= 2).sum(), 1)
  for q in np.flatnonzero(collapsed):
    k = max(1, min(n[q], int(np.ceil(n[q] * acr**0.5))))
    assert np.all(np.abs(adv[q]) <= np.sqrt(k / n[q]) + 1e-6)
    assert bool(card.valid[q]) == bool(acr > tau)


def test_avspo_virtual_rewards_and_threshold_state():
  r = np.array([[1, 1, 1, 1], [0, 0, 0, 0], [1, 0, 0, 1], [0, 0, 0, 0]], np.float32)
  card = advantages.compute("avspo", r)  # ACR = 3/4 > tau 0.5
  assert np.all(np.asarray(card.valid))
  assert np.all(card.advantages[0] > 0) and np.all(card.advantages[1] < 0)
  np.testing.assert_allclose(float(card.state.tau_adapt), 0.5)  # first batch: unchanged
  np.testing.assert_allclose(float(card.state.prev_reward_mean), 6 / 16)
  up = advantages.compute("avspo", np.ones((4, 4), np.float32) * [[1], [1], [1], [0]], state=card.state)
  np.testing.assert_allclose(float(up.state.tau_adapt), 0.99 * 0.5 + 0.01 * 1.0, rtol=1e-6)
  down = advantages.compute("avspo", np.zeros((4, 4), np.float32), state=up.state)
  np.testing.assert_allclose(float(down.state.tau_adapt), float(up.state.tau_adapt) - 0.01, rtol=1e-6)
  # Below the threshold collapsed groups stay invalid.
  low = advantages.compute("avspo", r, state=card.state.replace(tau_adapt=jnp.float32(0.9)))
  np.testing.assert_array_equal(low.valid, [False, False, True, False])


def test_accepts_numpy_and_jax_and_runs_under_vmap():
  r = np.random.default_rng(4).uniform(size=(3, P, G)).astype(np.float32)
  a = advantages.compute("maxnorm_rloo", r[0]).advantages
  b = advantages.compute("maxnorm_rloo", jnp.asarray(r[0])).advantages
  np.testing.assert_array_equal(a, b)
  batched = jax.vmap(lambda x: advantages.compute("maxnorm_rloo", x).advantages)(jnp.asarray(r))
  assert batched.shape == (3, P, G)
  np.testing.assert_allclose(batched[0], a, rtol=1e-6)
  assert isinstance(advantages.compute("grpo", r[0]), AdvantageCard)


@pytest.mark.parametrize("name", ["reinforce_pp", "reinforce_pp_baseline"])
def test_reinforce_pp_whitening_uses_the_unbiased_std_by_default(name):
  # 64 prompts x 8 = 512 samples: ddof 1 and 0 differ by sqrt(512/511) - 1 = 0.098%, which rtol 2e-5 resolves.
  rng = np.random.default_rng(7)
  r = rng.uniform(size=(64, 8)).astype(np.float32)
  card = advantages.compute(name, r, eps=0.0)
  u = r if name == "reinforce_pp" else r - r.mean(-1, keepdims=True)
  np.testing.assert_allclose(card.scale, np.full(64, u.std(ddof=1)), rtol=2e-5)
  np.testing.assert_allclose(card.advantages, ref.loop_advantages(name, r, eps=0.0), rtol=2e-5, atol=1e-6)
  biased = advantages.compute(name, r, eps=0.0, std_ddof=0)
  np.testing.assert_allclose(biased.scale, np.full(64, u.std(ddof=0)), rtol=2e-5)
  np.testing.assert_allclose(biased.advantages, ref.loop_advantages(name, r, eps=0.0, std_ddof=0), rtol=2e-5, atol=1e-6)
  ratio = float(card.scale[0] / biased.scale[0])
  assert ratio == pytest.approx(np.sqrt(512 / 511), rel=1e-5) and ratio > 1.0009
