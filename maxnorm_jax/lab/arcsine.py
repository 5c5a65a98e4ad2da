"""The arcsine view of seed 004, checked numerically with the registry's own estimators.

For binary rewards R_i ~ Bernoulli(p), the expected update of an estimator with advantages c_i
is E[(1/G) sum_i c_i grad log pi(tau_i)] = w(p) grad p, where (by symmetry and conditioning on
R_1; the other samples are independent of tau_1)

  w_G(p) = E[c_1 | R_1 = 1] - E[c_1 | R_1 = 0].

So the estimator follows the transformed objective f with f' proportional to w: its implied
transform is f(p) = int_0^p w / int_0^1 w, with asymptotic variance coefficient
V_f(p) = p (1 - p) f'(p)^2 (seed 004). GRPO's population weight is 1 / sqrt(p (1 - p)) =
pi * d/dp (2/pi) arcsin sqrt(p), so f is the arcsine transform and V_f = 1/pi^2, constant.

`expected_weight` computes w_G exactly (a binomial sum over the other G-1 rewards);
`population_weight` evaluates the large-group limit on groups with an exact success fraction;
`implied_transform` integrates and normalises it. Each p is its own one-prompt batch, so
REINFORCE++'s batch whitening runs over that group alone.
"""

import functools
import math

import jax
import jax.numpy as jnp
import numpy as np

from maxnorm_jax.core import advantages


def arcsine_weight(p) -> np.ndarray:
  """pi * d/dp (2/pi) arcsin sqrt(p) = 1 / sqrt(p (1 - p)), elementwise."""
  p = np.asarray(p, np.float64)
  return 1.0 / np.sqrt(p * (1.0 - p))


@functools.lru_cache(maxsize=None)
def _first_and_last_advantage(name: str, params: tuple, group_size: int):
  """Jitted rows [R, G] -> ([R] c of the first sample, [R] c of the last sample).

  Each row is scored as its own one-prompt batch (vmap over rows, chunked to bound memory).
  """
  kwargs = dict(params)

  def one(row):
    adv = advantages.compute(name, row[None, :], None, **kwargs).advantages[0]
    return adv[0], adv[-1]

  batch = max(1, min(256, (1 << 22) // (group_size * group_size)))
  return jax.jit(lambda rows: jax.lax.map(one, rows, batch_size=batch))


def _binomial_pmf(n: int, p: np.ndarray) -> np.ndarray:
  """[len(p), n + 1] Binomial(n, p) probabilities, computed in log space (float64)."""
  k = np.arange(n + 1)
  log_comb = np.array([math.lgamma(n + 1) - math.lgamma(i + 1) - math.lgamma(n - i + 1) for i in k])
  p = np.clip(np.asarray(p, np.float64), 1e-300, 1 - 1e-16)[:, None]
  return np.exp(log_comb + k * np.log(p) + (n - k) * np.log1p(-p))


def expected_weight(name: str, ps, group_size: int, **params) -> np.ndarray:
  """[len(ps)] w_G(p) = E[c_1 | R_1 = 1] - E[c_1 | R_1 = 0] for G Bernoulli(p) rewards, exactly.

  Conditions on k = the number of successes among the other G - 1 samples: the group is
  [R_1, 1 x k, 0 x (G-1-k)] and the estimator's c_1 is averaged with Binomial(G-1, p) weights.
  """
  g = group_size
  k = np.arange(g)  # successes among the other g - 1 samples
  others = (np.arange(1, g)[None, :] <= k[:, None]).astype(np.float32)  # [g, g-1]
  rows = np.concatenate(
    [
      np.concatenate([np.ones((g, 1), np.float32), others], axis=1),  # R_1 = 1
      np.concatenate([np.zeros((g, 1), np.float32), others], axis=1),  # R_1 = 0
    ]
  )  # [2g, g]
  c_first, _ = _first_and_last_advantage(name, tuple(sorted(params.items())), g)(jnp.asarray(rows))
  c_first = np.asarray(c_first, np.float64)
  diff = c_first[:g] - c_first[g:]  # [g] by k
  return _binomial_pmf(g - 1, np.asarray(ps)) @ diff


def population_weight(name: str, n: int = 256, **params) -> tuple[np.ndarray, np.ndarray]:
  """The large-group limit of w: p = k/n (k = 1..n-1) and c(success) - c(failure) there.

  A group of n samples with exactly k successes has success fraction p; as n grows, the
  conditioning on R_1 stops mattering and w_n(p) -> w_infinity(p).

  Returns:
    p: [n - 1] success fractions; w: [n - 1] weights.
  """
  k = np.arange(1, n)
  rows = (np.arange(n)[None, :] < k[:, None]).astype(np.float32)  # first k slots succeed
  c_succ, c_fail = _first_and_last_advantage(name, tuple(sorted(params.items())), n)(jnp.asarray(rows))
  return k / n, np.asarray(c_succ, np.float64) - np.asarray(c_fail, np.float64)


def implied_transform(p, w, n_theta: int = 8192) -> dict[str, np.ndarray]:
  """The transform f implied by a weight w(p) [N] on an increasing grid p [N] in (0, 1).

  Integrates with p = sin^2(theta) (dp = 2 sqrt(p(1-p)) dtheta), which keeps GRPO's
  1/sqrt(p(1-p)) endpoint singularity integrable: Z = int_0^1 w dp = 2 int h dtheta with
  h = w sqrt(p(1-p)) interpolated linearly in p (held constant beyond the grid).

  Returns:
    dict with p, weight, norm Z, f (f(0)=0, f(1)=1), fprime = w / Z and
    variance = p (1-p) fprime^2, all [N] but Z (a float).
  """
  p = np.asarray(p, np.float64)
  w = np.asarray(w, np.float64)
  h = w * np.sqrt(p * (1.0 - p))
  d_theta = (np.pi / 2) / n_theta
  theta = (np.arange(n_theta) + 0.5) * d_theta
  h_theta = np.interp(np.sin(theta) ** 2, p, h)
  cumulative = 2.0 * np.concatenate([[0.0], np.cumsum(h_theta) * d_theta])  # at theta edges
  z = cumulative[-1]
  edges = np.arange(n_theta + 1) * d_theta
  f = np.interp(np.arcsin(np.sqrt(p)), edges, cumulative) / z
  fprime = w / z
  return {"p": p, "weight": w, "norm": float(z), "f": f, "fprime": fprime, "variance": p * (1.0 - p) * fprime**2}


def arcsine_errors(group_sizes=(8, 32, 128, 512), ps=None, std_ddof: int = 0) -> dict[int, float]:
  """GRPO's max relative error to the arcsine limit over ps, per group size.

  error_G = max_p |w_G(p) / (1 / sqrt(p(1-p))) - 1|, w_G the exact expected update weight of
  `grpo` (population std by default, as in seed 004).
  """
  ps = np.linspace(0.1, 0.9, 9) if ps is None else np.asarray(ps)
  target = arcsine_weight(ps)
  return {
    g: float(np.max(np.abs(expected_weight("grpo", ps, g, std_ddof=std_ddof) / target - 1.0))) for g in group_sizes
  }


def transforms(names=None, n: int = 256) -> dict[str, dict[str, np.ndarray]]:
  """The implied transform (see `implied_transform`) of every registry estimator."""
  names = advantages.names() if names is None else names
  return {name: implied_transform(*population_weight(name, n)) for name in names}
