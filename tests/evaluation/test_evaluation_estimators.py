"""pass@k against hand values and the brute-force definition, maj@k, mean@n, bootstrap std."""

import itertools
import math

import numpy as np
import pytest

from maxnorm_jax.evaluation import bootstrap_std, maj_at_k, majority_answer, mean_at_n, pass_at_k, set_metrics


def _brute_pass_at_k(n, c, k):
  """The definition: the fraction of k-subsets of the n samples holding a correct one."""
  samples = [True] * c + [False] * (n - c)
  subsets = list(itertools.combinations(range(n), k))
  return sum(any(samples[i] for i in s) for s in subsets) / len(subsets)


def test_pass_at_k_hand_values():
  assert pass_at_k(10, 0, 1) == 0.0
  assert pass_at_k(10, 3, 1) == pytest.approx(0.3)
  assert pass_at_k(4, 1, 2) == pytest.approx(0.5)  # 1 - C(3,2)/C(4,2) = 1 - 3/6
  assert pass_at_k(5, 2, 2) == pytest.approx(0.7)  # 1 - C(3,2)/C(5,2) = 1 - 3/10
  assert pass_at_k(4, 3, 2) == 1.0  # n - c < k: every pair holds a correct one
  assert pass_at_k(8, 8, 8) == 1.0


def test_pass_at_k_equals_brute_force_definition():
  for n in range(1, 8):
    for c in range(n + 1):
      for k in range(1, n + 1):
        assert pass_at_k(n, c, k) == pytest.approx(_brute_pass_at_k(n, c, k), abs=1e-12), (n, c, k)


def test_pass_at_k_closed_form_large_n_and_broadcasting():
  got = pass_at_k(200, np.array([0, 1, 50, 199]), np.array([[1], [100]]))
  assert got.shape == (2, 4)
  want = [[1 - math.comb(200 - c, k) / math.comb(200, k) for c in (0, 1, 50, 199)] for k in (1, 100)]
  np.testing.assert_allclose(got, want, rtol=1e-10)


@pytest.mark.parametrize(
  "n,c,k,match", [(4, 1, 5, "k must be <= n"), (4, 5, 2, r"c \(correct"), (4, -1, 2, r"c \(correct"), (4, 1, 0, ">= 1")]
)
def test_pass_at_k_errors(n, c, k, match):
  with pytest.raises(ValueError, match=match):
    pass_at_k(n, c, k)


def test_majority_answer_ties_go_to_the_first_occurring_answer():
  assert majority_answer(["3", "4", "4", "3"]) == 0  # 2-2 tie: "3" occurs first
  assert majority_answer([None, "5", "7", "7"]) == 2
  assert majority_answer([None, None]) is None
  assert majority_answer(["9", None, None]) == 0  # None never votes


def test_maj_at_k_cases():
  answers = [["1", "2", "2", "2"], ["1", "2", "2", "3"], [None, None, None, None], ["5", "6", "7", "6"]]
  correct = np.array([[1, 0, 0, 0], [0, 1, 1, 0], [0, 0, 0, 0], [0, 1, 0, 1]], bool)
  np.testing.assert_array_equal(maj_at_k(answers, correct, 4), [0, 1, 0, 1])
  np.testing.assert_array_equal(maj_at_k(answers, correct, 1), [1, 0, 0, 0])  # the first sample alone
  np.testing.assert_array_equal(maj_at_k(answers, correct, 2), [1, 0, 0, 0])  # 1-1 ties: the first answer
  with pytest.raises(ValueError, match="k must lie in"):
    maj_at_k(answers, correct, 5)


def test_mean_at_n_and_bootstrap_std_of_a_known_case():
  np.testing.assert_allclose(mean_at_n([[1, 0, 0.5, 0.5], [0, 0, 0, 0]]), [0.5, 0.0])
  assert bootstrap_std(np.full(7, 0.3)) == pytest.approx(
    0.0, abs=1e-12
  )  # no spread between prompts, no spread of the mean
  # Half the prompts 1, half 0: the mean of P resampled prompts has std sqrt(0.25 / P).
  values = np.array([1.0, 0.0] * 50)
  std = bootstrap_std(values, num_resamples=4000, seed=0)
  assert std == pytest.approx(0.05, rel=0.05)
  assert std == bootstrap_std(values, num_resamples=4000, seed=0)  # fixed seed: reproducible
  assert bootstrap_std(values, num_resamples=4000, seed=1) != std


def test_set_metrics_names_and_values():
  rewards = np.array([[1, 0, 1, 0], [0, 0, 0, 0.5]], np.float64)
  correct = rewards >= 1
  m = set_metrics(
    "eval/x", rewards, correct, np.array([True, False]), pass_k=(1, 2, 8), answers=[["a", "b", "a", "b"], ["c"] * 4]
  )
  assert set(m) == {
    f"eval/x/{name}{s}"
    for name in ("mean@4", "pass@1", "pass@2", "maj@1", "maj@2", "greedy_acc")
    for s in ("", "_n", "_std")
  }
  assert m["eval/x/mean@4"] == pytest.approx((0.5 + 0.125) / 2)
  assert m["eval/x/pass@1"] == pytest.approx(0.25)
  assert m["eval/x/pass@2"] == pytest.approx((1 - 1 / 6) / 2)
  assert m["eval/x/maj@2"] == pytest.approx(0.5)
  assert m["eval/x/greedy_acc"] == 0.5 and m["eval/x/greedy_acc_n"] == 2.0
  assert m["eval/x/greedy_acc_std"] > 0
