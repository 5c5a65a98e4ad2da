"""The advantage card: the three-way calibration interface of seed 000 (docs/DESIGN.md §3.1)."""

from typing import Any

import flax.struct
import jax


@flax.struct.dataclass
class AdvantageCard:
  """What an estimator says about one batch of P groups of G completions.

  Attributes:
    numerator: [P, G] u, the raw, trusted cardinal numerator (zero where masked).
    scale: [P] s_q, the within-group scale denominator (1 for unscaled methods).
    advantages: [P, G] c = u / s_q, or the estimator's own weight; zero where invalid.
    kl_weight: [P] multiplier of beta for the prompt's KL branch (0 when the group is skipped).
    valid: [P] bool, the group takes part in the reward branch of the update.
    state: the estimator's carried state after this batch (AVSPO's threshold), or None.
  """

  numerator: jax.Array
  scale: jax.Array
  advantages: jax.Array
  kl_weight: jax.Array
  valid: jax.Array
  state: Any = None
