"""A tabular-softmax contextual bandit with the three kinds of prompt of seed 000.

Each prompt q has K answers (arms); the policy is a table of logits [P, K], pi_q = softmax.
A step samples G answers per prompt and pays each its arm's mean reward plus Gaussian noise.

Kinds of prompt:
  jitter:   every answer pays `base_reward` up to offsets and noise far below delta_res
            (span < delta_res): no credible preference, only sub-resolution jitter.
  credible: one answer pays a gap in [credible_gap_min, credible_gap_max] above the others;
            the gap is above delta_res while the group std stays below 1e-2 (gap/2 at most).
  binary:   a random subset of the answers is correct (reward 1), the rest pay 0.

Shapes: P prompts, K arms, G samples per prompt.
"""

import dataclasses

import flax.struct
import jax
import jax.numpy as jnp
import numpy as np

JITTER, CREDIBLE, BINARY = 0, 1, 2
KIND_NAMES = ("jitter", "credible", "binary")


@dataclasses.dataclass(frozen=True)
class BanditConfig:
  """The bandit's prompts and payoffs (hashable, so compiled simulations can be cached on it)."""

  n_jitter: int = 16
  n_credible: int = 16
  n_binary: int = 16
  arms: int = 8
  base_reward: float = 0.5
  jitter_spread: float = 2e-3  # jitter arms pay base + U(-spread, spread): span < 4e-3 < delta_res
  noise_sd: float = 1e-4  # reward noise on jitter and credible prompts (binary rewards are exact)
  credible_gap_min: float = 0.012
  credible_gap_max: float = 0.018
  ref_logit_sd: float = 0.5
  # The policy starts at ref + init_drift * N(0, 1): diagnostics are taken mid-training, where the
  # policy already sits away from the reference (in a model, shared parameters carry it there).
  init_drift: float = 0.3
  seed: int = 0

  @property
  def prompts(self) -> int:
    return self.n_jitter + self.n_credible + self.n_binary


@flax.struct.dataclass
class Bandit:
  """A drawn bandit.

  Attributes:
    mean_reward: [P, K] expected reward of each answer.
    noise_sd: [P] std of the Gaussian noise added to each sampled reward.
    kind: [P] int32, JITTER / CREDIBLE / BINARY.
    ref_logits: [P, K] the reference policy's logits.
    init_logits: [P, K] the policy's logits before the first step.
  """

  mean_reward: jax.Array
  noise_sd: jax.Array
  kind: jax.Array
  ref_logits: jax.Array
  init_logits: jax.Array


def make_bandit(config: BanditConfig) -> Bandit:
  """Draws the bandit of `config` (numpy RNG seeded by config.seed; deterministic)."""
  rng = np.random.default_rng(config.seed)
  k = config.arms
  jitter = config.base_reward + rng.uniform(-config.jitter_spread, config.jitter_spread, size=(config.n_jitter, k))
  credible = np.full((config.n_credible, k), config.base_reward)
  good = rng.integers(0, k, size=config.n_credible)
  gaps = rng.uniform(config.credible_gap_min, config.credible_gap_max, size=config.n_credible)
  credible[np.arange(config.n_credible), good] += gaps
  binary = np.zeros((config.n_binary, k))
  for q in range(config.n_binary):
    n_correct = rng.integers(1, k)  # 1 .. K-1 correct answers
    binary[q, rng.choice(k, size=n_correct, replace=False)] = 1.0
  mean_reward = np.concatenate([jitter, credible, binary], axis=0)
  noise_sd = np.concatenate(
    [
      np.full(config.n_jitter, config.noise_sd),
      np.full(config.n_credible, config.noise_sd),
      np.zeros(config.n_binary),
    ]
  )
  kind = np.concatenate(
    [
      np.full(config.n_jitter, JITTER),
      np.full(config.n_credible, CREDIBLE),
      np.full(config.n_binary, BINARY),
    ]
  )
  ref_logits = config.ref_logit_sd * rng.standard_normal((config.prompts, k))
  init_logits = ref_logits + config.init_drift * rng.standard_normal((config.prompts, k))
  return Bandit(
    mean_reward=jnp.asarray(mean_reward, jnp.float32),
    noise_sd=jnp.asarray(noise_sd, jnp.float32),
    kind=jnp.asarray(kind, jnp.int32),
    ref_logits=jnp.asarray(ref_logits, jnp.float32),
    init_logits=jnp.asarray(init_logits, jnp.float32),
  )


def sample(bandit: Bandit, logits: jax.Array, key: jax.Array, group_size: int):
  """Samples G answers per prompt from softmax(logits [P, K]).

  Returns:
    actions: [P, G] int32 arm indices.
    rewards: [P, G] float32, mean reward of the arm plus noise.
  """
  k_act, k_noise = jax.random.split(key)
  p = logits.shape[0]
  actions = jax.random.categorical(k_act, logits[:, None, :], axis=-1, shape=(p, group_size))
  mean = jnp.take_along_axis(bandit.mean_reward, actions, axis=-1)
  noise = bandit.noise_sd[:, None] * jax.random.normal(k_noise, mean.shape, mean.dtype)
  return actions.astype(jnp.int32), mean + noise


def log_probs(logits: jax.Array, actions: jax.Array) -> jax.Array:
  """[P, G] log pi(a | q) of the sampled actions [P, G] under logits [P, K]."""
  return jnp.take_along_axis(jax.nn.log_softmax(logits, axis=-1), actions, axis=-1)


def kl_to_ref(logits: jax.Array, ref_logits: jax.Array) -> jax.Array:
  """[P] exact KL(pi_q || pi_ref_q) of the tabular policies [P, K]."""
  logp = jax.nn.log_softmax(logits, axis=-1)
  ref = jax.nn.log_softmax(ref_logits, axis=-1)
  return jnp.sum(jnp.exp(logp) * (logp - ref), axis=-1)


def expected_reward(logits: jax.Array, mean_reward: jax.Array) -> jax.Array:
  """[P] E_pi[r] per prompt."""
  return jnp.sum(jax.nn.softmax(logits, axis=-1) * mean_reward, axis=-1)


def best_arm_prob(logits: jax.Array, mean_reward: jax.Array) -> jax.Array:
  """[P] probability the policy puts on the answers with the highest mean reward."""
  best = mean_reward >= jnp.max(mean_reward, axis=-1, keepdims=True)
  return jnp.sum(jnp.where(best, jax.nn.softmax(logits, axis=-1), 0.0), axis=-1)
