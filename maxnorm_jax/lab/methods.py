"""The method rows of the lab: one registry estimator with or without the Protocol.

Rows follow seed 000's Tables 2 and 3 (Protocol on for RLOO, p90 and MaxNorm; off for GRPO,
GRPO+beta_q-comp, Dr.GRPO and REINFORCE++), plus every other registry estimator in its original
form (GOPO, AVSPO, F-GRPO, REINFORCE++-baseline), GRPO+Protocol, which isolates the gate, and
Table 2's MaxNorm-RLOO with the gate off but train-time delta_res binning on.
Every row skips zero-advantage groups (the tables' "ZG skip = Y").

Each lab row is a row of the one method table, `maxnorm_jax.method_rows.METHODS`, shown under
the seed's label: the lab takes the row's estimator, its parameters and the Protocol's gate and
binning. Label -> row: RLOO+Protocol -> rloo_protocol, GRPO -> grpo, GRPO+Protocol ->
grpo_protocol, GRPO+beta_q-comp -> grpo_beta_comp, Dr.GRPO -> dr_grpo, REINFORCE++ ->
reinforce_pp, REINFORCE++-baseline -> reinforce_pp_baseline, p90+Protocol -> p90_protocol,
MaxNorm-RLOO -> maxnorm_rloo_nobin (the seed's Table 3 row has no binning; the trainer's
`maxnorm_rloo` bins), MaxNorm-RLOO bin,no gate -> maxnorm_rloo_protocol_off, MaxNorm-Dr.GRPO ->
maxnorm_dr_grpo_nobin, GOPO -> gopo, AVSPO -> avspo, F-GRPO -> f_grpo.
"""

import dataclasses

from maxnorm_jax.core import advantages
from maxnorm_jax.method_rows import METHODS


@dataclasses.dataclass(frozen=True)
class Method:
  """One row: `estimator` from the registry, the Protocol's gate on or off, optional binning.

  `params` are the estimator's keyword parameters as (name, value) pairs (hashable); `row` is
  the name of the METHODS row it was built from.
  """

  label: str
  estimator: str
  protocol: bool
  binning: bool = False
  params: tuple = ()
  row: str = ""

  def kwargs(self) -> dict:
    return dict(self.params)


def from_row(name: str, label: str) -> Method:
  """The lab row of METHODS[name], shown as `label`."""
  row = METHODS[name]
  gate, binning = row["protocol"]["gate"], row["protocol"]["binning"]
  return Method(label, row["estimator"], gate, binning, tuple(sorted(row.get("params", {}).items())), row=name)


RLOO_P = from_row("rloo_protocol", "RLOO+Protocol")
GRPO = from_row("grpo", "GRPO")
GRPO_P = from_row("grpo_protocol", "GRPO+Protocol")
GRPO_BETA = from_row("grpo_beta_comp", "GRPO+beta_q-comp")
DR_GRPO = from_row("dr_grpo", "Dr.GRPO")
REINFORCE_PP = from_row("reinforce_pp", "REINFORCE++")
REINFORCE_PP_B = from_row("reinforce_pp_baseline", "REINFORCE++-baseline")
P90_P = from_row("p90_protocol", "p90+Protocol")
MAXNORM_RLOO = from_row("maxnorm_rloo_nobin", "MaxNorm-RLOO")
MAXNORM_RLOO_BIN = from_row("maxnorm_rloo_protocol_off", "MaxNorm-RLOO bin,no gate")
MAXNORM_DR = from_row("maxnorm_dr_grpo_nobin", "MaxNorm-Dr.GRPO")
GOPO = from_row("gopo", "GOPO")
AVSPO = from_row("avspo", "AVSPO")
F_GRPO = from_row("f_grpo", "F-GRPO")

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
