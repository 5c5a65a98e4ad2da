"""The method rows of the lab: one registry estimator with or without the Protocol.

Rows follow seed 000's Tables 2 and 3 (Protocol on for RLOO, p90 and MaxNorm; off for GRPO,
GRPO+beta_q-comp, Dr.GRPO and REINFORCE++), plus every other registry estimator in its original
form (GOPO, AVSPO, F-GRPO, REINFORCE++-baseline), GRPO+Protocol, which isolates the gate, and
Table 2's MaxNorm-RLOO with the gate off but train-time delta_res binning on.
Every row skips zero-advantage groups (the tables' "ZG skip = Y").
"""

import dataclasses

from maxnorm_jax.core import advantages


@dataclasses.dataclass(frozen=True)
class Method:
  """One row: `estimator` from the registry, the Protocol's gate on or off, optional binning.

  `params` are the estimator's keyword parameters as (name, value) pairs (hashable).
  """

  label: str
  estimator: str
  protocol: bool
  binning: bool = False
  params: tuple = ()

  def kwargs(self) -> dict:
    return dict(self.params)


RLOO_P = Method("RLOO+Protocol", "rloo", True)
GRPO = Method("GRPO", "grpo", False)
GRPO_P = Method("GRPO+Protocol", "grpo", True)
GRPO_BETA = Method("GRPO+beta_q-comp", "grpo_beta_comp", False)
DR_GRPO = Method("Dr.GRPO", "dr_grpo", False)
REINFORCE_PP = Method("REINFORCE++", "reinforce_pp", False)
REINFORCE_PP_B = Method("REINFORCE++-baseline", "reinforce_pp_baseline", False)
P90_P = Method("p90+Protocol", "p90", True)
MAXNORM_RLOO = Method("MaxNorm-RLOO", "maxnorm_rloo", True)
MAXNORM_RLOO_BIN = Method("MaxNorm-RLOO bin,no gate", "maxnorm_rloo", False, binning=True)
MAXNORM_DR = Method("MaxNorm-Dr.GRPO", "maxnorm_dr_grpo", True)
GOPO = Method("GOPO", "gopo", False)
AVSPO = Method("AVSPO", "avspo", False)
F_GRPO = Method("F-GRPO", "f_grpo", False)

TABLE_ROWS: tuple[Method, ...] = (
  RLOO_P,
  GRPO,
  GRPO_P,
  GRPO_BETA,
  DR_GRPO,
  REINFORCE_PP,
  REINFORCE_PP_B,
  P90_P,
  MAXNORM_RLOO,
  MAXNORM_RLOO_BIN,
  MAXNORM_DR,
  GOPO,
  AVSPO,
  F_GRPO,
)


def missing_estimators(rows=TABLE_ROWS) -> list[str]:
  """Registry estimators that no row uses (empty when the table covers the registry)."""
  return sorted(set(advantages.names()) - {m.estimator for m in rows})
