"""Seed 004's arcsine view, checked with the registry's estimators."""

import math

import numpy as np
import pytest

from maxnorm_jax.lab import arcsine

INV_PI2 = 1.0 / math.pi**2


def test_arcsine_weight_is_pi_times_the_derivative_of_the_transform():
  p = np.linspace(0.05, 0.95, 19)
  h = 1e-6

  def f(x):
    return (2 / np.pi) * np.arcsin(np.sqrt(x))

  np.testing.assert_allclose(arcsine.arcsine_weight(p), np.pi * (f(p + h) - f(p - h)) / (2 * h), rtol=1e-5)


def test_expected_weight_hand_values():
  # Dr.GRPO: c_1 = (1 - 1/G) R_1 - (1/G) sum_others, so w_G = 1 - 1/G for every p;
  # RLOO: c_1 = R_1 - mean of the others, so w_G = 1.
  ps = np.array([0.1, 0.5, 0.8])
  np.testing.assert_allclose(arcsine.expected_weight("dr_grpo", ps, 8), 1 - 1 / 8, rtol=1e-6)
  np.testing.assert_allclose(arcsine.expected_weight("rloo", ps, 8), 1.0, rtol=1e-6)


def test_expected_weight_matches_monte_carlo():
  rng = np.random.default_rng(0)
  g, p = 6, 0.3
  from maxnorm_jax.core import advantages

  rewards = (rng.random((20000, g)) < p).astype(np.float32)
  c = np.asarray(advantages.compute("grpo", rewards, std_ddof=0).advantages)
  r1 = rewards[:, 0] == 1
  mc = c[r1, 0].mean() - c[~r1, 0].mean()
  exact = arcsine.expected_weight("grpo", [p], g, std_ddof=0)[0]
  assert abs(mc - exact) < 0.03 * exact


def test_grpo_expected_update_converges_to_arcsine_limit(lab_result):
  errors = lab_result.arcsine_errors
  sizes = sorted(errors)
  assert sizes == [8, 32, 128, 512]
  values = [errors[g] for g in sizes]
  assert all(b < a / 3 for a, b in zip(values, values[1:])), values  # O(1/G): each 4x step cuts it >3x
  assert values[0] > 0.1  # finite groups really differ from the limit
  assert values[-1] < 5e-3  # within 0.5% of pi * grad (2/pi) arcsin sqrt(p) at G = 512


def test_grpo_default_ddof_also_converges():
  errors = arcsine.arcsine_errors((16, 256), std_ddof=1)
  assert errors[256] < errors[16] / 10
  assert errors[256] < 1e-2


@pytest.mark.parametrize("name", ["grpo", "grpo_beta_comp", "avspo", "reinforce_pp", "reinforce_pp_baseline"])
def test_variance_coefficient_is_one_over_pi_squared(lab_result, name):
  r = lab_result.transforms[name]
  np.testing.assert_allclose(r["variance"], INV_PI2, rtol=1e-3)


def test_grpo_transform_is_the_arcsine(lab_result):
  r = lab_result.transforms["grpo"]
  np.testing.assert_allclose(r["f"], (2 / np.pi) * np.arcsin(np.sqrt(r["p"])), atol=1e-3)
  assert r["norm"] == pytest.approx(math.pi, rel=3e-3)


def _at(r, p):
  return r["variance"][int(np.argmin(np.abs(r["p"] - p)))]


@pytest.mark.parametrize("name", ["rloo", "dr_grpo", "gopo"])
def test_unscaled_estimators_imply_the_identity_transform(lab_result, name):
  # f(p) = p, so V(p) = p (1 - p): not constant, 0.25 at p = 1/2, 0.09 at p = 0.1.
  r = lab_result.transforms[name]
  np.testing.assert_allclose(r["f"], r["p"], atol=5e-3)
  for p in (0.1, 0.25, 0.5, 0.9):
    assert _at(r, p) == pytest.approx(p * (1 - p), rel=0.02)


@pytest.mark.parametrize("name", ["maxnorm_rloo", "maxnorm_dr_grpo"])
def test_maxnorm_variance_coefficient(lab_result, name):
  # Population weight 1 / max(p, 1-p); int_0^1 of it is 2 ln 2, so
  # V(p) = min(p, 1-p) / (max(p, 1-p) 4 ln^2 2): 0.520 at p = 1/2, 0.058 at p = 0.1.
  r = lab_result.transforms[name]
  for p in (0.1, 0.25, 0.5, 0.75):
    expected = min(p, 1 - p) / (max(p, 1 - p) * 4 * math.log(2) ** 2)
    assert _at(r, p) == pytest.approx(expected, rel=0.02)
  inner = (r["p"] > 0.05) & (r["p"] < 0.95)
  assert r["variance"][inner].max() > 4 * INV_PI2  # far from the minimax constant


def test_every_registry_estimator_has_a_transform(lab_result):
  from maxnorm_jax.core import advantages

  assert sorted(lab_result.transforms) == advantages.names()
  for r in lab_result.transforms.values():
    assert np.all(np.diff(r["f"]) >= -1e-9) and 0 <= r["f"][0] and r["f"][-1] <= 1
