"""The method rows: one table of named methods, shared by the trainer's config and the bandit lab.

A row is a dict whose keys are config sections (`protocol`, `loss`, `filter`, `overlong`,
`optim`, `train`, ...) mapping to the values it sets there, plus two short forms for the
estimator: `estimator` (-> `advantage.estimator`) and `params` (-> `advantage.params`, its
keyword parameters). Everything a row does not set comes from the base config. `apply_row`
applies a row over a locked ConfigDict, so a key that is not in the base config fails naming
the row and the key.

The lab (`maxnorm_jax.lab.methods`) reads the estimator, its parameters and the Protocol's gate
and binning of the same rows; its simulated update has no loss, filter or overlong options and
always skips zero-advantage groups.
"""

from __future__ import annotations

from typing import Any

DELTA_RES = 1e-2  # the Protocol's reward resolution; also the MaxNorm / p90 scale floor tau_res

_PROTOCOL_ON = dict(gate=True, binning=False, zero_group="skip")
_PROTOCOL_BINNING = dict(gate=True, binning=True, zero_group="skip")
_PROTOCOL_OFF = dict(gate=False, binning=False, zero_group="keep")

METHODS: dict[str, dict[str, Any]] = {
  "grpo": dict(estimator="grpo", protocol=_PROTOCOL_OFF),
  "grpo_protocol": dict(estimator="grpo", protocol=_PROTOCOL_ON),
  "rloo_protocol": dict(estimator="rloo", protocol=_PROTOCOL_ON),
  "dr_grpo": dict(estimator="dr_grpo", protocol=_PROTOCOL_OFF, loss=dict(aggregation="seq-mean-token-sum-norm")),
  "reinforce_pp": dict(estimator="reinforce_pp", protocol=_PROTOCOL_OFF),
  "reinforce_pp_baseline": dict(estimator="reinforce_pp_baseline", protocol=_PROTOCOL_OFF),
  "p90_protocol": dict(estimator="p90", params=dict(tau_res=DELTA_RES, quantile=0.9), protocol=_PROTOCOL_ON),
  "grpo_beta_comp": dict(estimator="grpo_beta_comp", params=dict(beta_comp_max=10.0), protocol=_PROTOCOL_OFF),
  "gopo": dict(estimator="gopo", params=dict(ties="average"), protocol=_PROTOCOL_OFF),
  "maxnorm_rloo": dict(estimator="maxnorm_rloo", params=dict(tau_res=DELTA_RES), protocol=_PROTOCOL_BINNING),
  "maxnorm_rloo_nobin": dict(estimator="maxnorm_rloo", params=dict(tau_res=DELTA_RES), protocol=_PROTOCOL_ON),
  "maxnorm_rloo_protocol_off": dict(
    estimator="maxnorm_rloo", params=dict(tau_res=DELTA_RES), protocol=dict(gate=False, binning=True, zero_group="keep")
  ),
  "maxnorm_dr_grpo": dict(estimator="maxnorm_dr_grpo", params=dict(tau_res=DELTA_RES), protocol=_PROTOCOL_BINNING),
  "maxnorm_dr_grpo_nobin": dict(estimator="maxnorm_dr_grpo", params=dict(tau_res=DELTA_RES), protocol=_PROTOCOL_ON),
  "avspo": dict(estimator="avspo", protocol=_PROTOCOL_OFF),
  "f_grpo": dict(estimator="f_grpo", params=dict(gamma=1.0, success_threshold=0.5), protocol=_PROTOCOL_OFF),
  "dapo": dict(
    estimator="grpo",
    protocol=_PROTOCOL_OFF,
    loss=dict(clip_low=0.2, clip_high=0.28, aggregation="token-mean"),
    filter=dict(mode="resample"),
    overlong=dict(penalty=True, mask_truncated=True),
  ),
  "filter_drop": dict(estimator="grpo", protocol=_PROTOCOL_OFF, filter=dict(mode="drop")),
}


def apply_row(config, name: str, row: dict[str, Any] | None = None) -> None:
  """Sets the values of row `name` (of METHODS, or `row` when given) on `config` in place.

  `config` is an ml_collections ConfigDict; it is locked while the row is applied, so a key
  outside the base config raises KeyError naming `METHODS[name]` and the key. `advantage.params`
  stays open (validate() checks its keys against the estimator).
  """
  row = METHODS[name] if row is None else row
  was_locked = config.is_locked
  config.lock()
  config.advantage.params.unlock()
  try:
    for key, value in row.items():
      where = f"METHODS[{name!r}].{key}"
      if key == "estimator":
        config.advantage.estimator = value
      elif key == "params":
        config.advantage.params.update(value)
      elif key not in config or not hasattr(config[key], "items"):
        sections = sorted(k for k, v in config.items() if hasattr(v, "items"))
        raise KeyError(f"{where}: not a config section; rows set 'estimator', 'params' or one of {sections}")
      else:
        for k, v in value.items():
          if k not in config[key]:
            raise KeyError(f"{where}.{k}: config.{key} has no key {k!r}; keys: {sorted(config[key])}")
          config[key][k] = v
  finally:
    if not was_locked:
      config.unlock()
