"""The device side of one RL step: log-prob passes, the advantage card, the PPO update, metrics.

Every function here is pure and jitted once per static spec (frozen dataclasses), so runs and
tests with the same shapes share compilations. Shapes: P prompts, G samples per prompt,
B = P * G sequences (row q * G + i is sample i of prompt q), L prompt tokens, N completion tokens.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any

import jax
import jax.numpy as jnp
import optax
from flax import struct
from jax.sharding import Mesh

from maxnorm_jax.core import advantages, diagnostics, groups, losses, protocol
from maxnorm_jax.core.cards import AdvantageCard
from maxnorm_jax.models import layers
from maxnorm_jax.models.config import ModelConfig
from maxnorm_jax.models.decoder import hidden_states, load_balancing_loss
from maxnorm_jax.models.logprobs import logprobs_from_hidden
from maxnorm_jax.parallel.rules import Rules
from maxnorm_jax.parallel.sharding import constrain_rows
from maxnorm_jax.train.state import TrainState

# XLA:CPU's YNNPACK fusions, on by default, make the float32 log-prob pass's forward slower by a fifth
# to a third and leave the update's grad level (BENCHMARKS.md, "The KV cache in blocks and YNNPACK off
# in the dense passes"); the sampler's decode loop gains from them and keeps them. In bfloat16 they
# are XLA:CPU's fast matmuls (AMX), and both passes keep them. Only the CPU compiler reads this option.
DENSE_PASS_COMPILER_OPTIONS = {"xla_cpu_experimental_ynn_fusion_type": ""}


def dense_pass_compiler_options(cfg: ModelConfig) -> dict:
  """The log-prob pass's and the update's compiler options for the compute dtype `cfg.dtype`."""
  return {} if cfg.jnp_dtype in layers.SIXTEEN_BIT_FLOATS else DENSE_PASS_COMPILER_OPTIONS


@struct.dataclass
class Rollout:
  """One batch of B sampled sequences with everything the update needs.

  prompt_ids, prompt_mask [B, L] (left-padded); tokens, mask [B, N] (the completion and its real
  tokens); loss_mask [B, N] (mask without the completions the loss ignores, e.g. truncated ones
  under DAPO's masking); old_logp, ref_logp [B, N]; advantages, kl_weight [B] float32 and
  takes_part [B] bool (`losses.card_to_sequences`).
  """

  prompt_ids: jax.Array
  prompt_mask: jax.Array
  tokens: jax.Array
  mask: jax.Array
  loss_mask: jax.Array
  old_logp: jax.Array
  ref_logp: jax.Array
  advantages: jax.Array
  kl_weight: jax.Array
  takes_part: jax.Array


@dataclasses.dataclass(frozen=True)
class CardSpec:
  """Static choices of the advantage card: estimator, its parameters, Protocol and filter."""

  estimator: str
  params: tuple[tuple[str, Any], ...]
  delta_res: float
  gate: bool
  binning: bool
  zero_group: str
  drop_collapsed: bool = False
  collapse_std: float = 1e-6


@dataclasses.dataclass(frozen=True)
class UpdateSpec:
  """Static choices of the PPO update."""

  model: ModelConfig
  mesh: Mesh
  rules: Rules
  optimizer: Any  # optax.GradientTransformation (cached per config, so hashable by identity)
  temperature: float
  surrogate: str
  aggregation: str
  kl_kind: str
  kl_in_loss: bool
  dual_clip: float | None
  ppo_epochs: int
  minibatches: int
  grad_accum: int
  top_k: int = 0  # the rollouts' truncation: the log-prob passes score the distribution sampled from
  top_p: float = 1.0
  max_len: int = 0  # Dr.GRPO's length constant: rollout.max_new_tokens (0: the batch's width), so trimming keeps it


# ------------------------------------------------------------------------------- log-prob pass


def completion_pass(
  cfg: ModelConfig,
  temperature: float,
  params,
  prompt_ids,
  prompt_mask,
  tokens,
  mask,
  top_k: int = 0,
  top_p: float = 1.0,
  mesh: Mesh | None = None,
  rules: Rules = (),
):
  """Per-token log-probs and entropies of the completion tokens, and the MoE balancing loss.

  prompt_ids, prompt_mask [B, L]; tokens, mask [B, N] -> logp, entropy [B, N] (0 off the mask), lb [].
  Logits at position t score token t+1, so the completion is scored from positions L-1 .. L+N-2.
  Scored under the distribution the rollouts were drawn from: temperature, top_k, top_p
  (`maxnorm_jax.core.truncation`; docs/DESIGN.md §3.4). With a `mesh`, the decoder's activations
  stay sharded by rows (`models.layers.ACTIVATION_AXES`).
  """
  length = prompt_ids.shape[1]
  n = tokens.shape[1]
  ids = jnp.concatenate([prompt_ids, tokens], axis=1)
  attn = jnp.concatenate([prompt_mask, mask], axis=1)
  h, router = hidden_states(cfg, params, ids, attn, mesh=mesh, rules=rules)
  out = logprobs_from_hidden(
    cfg, params, h[:, length - 1 : length + n - 1], tokens, mask, temperature=temperature, top_k=top_k, top_p=top_p
  )
  return out.logp, out.entropy, load_balancing_loss(cfg, router, attn)


_LOGPROB_STATIC = ("cfg", "temperature", "microbatches", "top_k", "top_p", "mesh", "rules")


@functools.partial(jax.jit, static_argnames=_LOGPROB_STATIC, compiler_options=DENSE_PASS_COMPILER_OPTIONS)
def sequence_logprobs(
  cfg: ModelConfig,
  temperature: float,
  params,
  prompt_ids,
  prompt_mask,
  tokens,
  mask,
  microbatches: int = 1,
  *,
  top_k: int = 0,
  top_p: float = 1.0,
  mesh: Mesh | None = None,
  rules: Rules = (),
):
  """(logp, entropy) [B, N] of the completions under `params` (old policy or reference), scored
  under the sampling distribution (temperature, top_k, top_p: `completion_pass`); with a `mesh`,
  activations pinned to rows over its batch axes.

  microbatches M > 1: the rows go through in M passes of B/M (rows i, i+M, ...: every pass keeps
  the batch's row sharding), so activations are those of B/M rows.
  """
  if microbatches == 1:
    logp, entropy, _ = completion_pass(
      cfg, temperature, params, prompt_ids, prompt_mask, tokens, mask, top_k, top_p, mesh, rules
    )
    return logp, entropy
  b = tokens.shape[0]

  def split(x):  # [B, ...] -> [M, B/M, ...]
    return x.reshape((b // microbatches, microbatches) + x.shape[1:]).swapaxes(0, 1)

  def one(_, xs):
    logp, entropy, _ = completion_pass(cfg, temperature, params, *xs, top_k, top_p, mesh, rules)
    return None, (logp, entropy)

  _, (logp, entropy) = jax.lax.scan(one, None, tuple(map(split, (prompt_ids, prompt_mask, tokens, mask))))
  return tuple(x.swapaxes(0, 1).reshape(b, -1) for x in (logp, entropy))


_sequence_logprobs_16bit = jax.jit(sequence_logprobs.__wrapped__, static_argnames=_LOGPROB_STATIC)


def logprobs_fn(cfg: ModelConfig):
  """`sequence_logprobs` compiled with the options of `dense_pass_compiler_options(cfg)`."""
  return sequence_logprobs if dense_pass_compiler_options(cfg) else _sequence_logprobs_16bit


def length_buckets(max_new_tokens: int, count: int = 4) -> tuple[int, ...]:
  """Upper bounds of the completion-length buckets of the mismatch metrics: `count` equal ranges
  of 1..max_new_tokens (fewer when max_new_tokens < count)."""
  return tuple(sorted({-(-max_new_tokens * k // count) for k in range(1, count + 1)}))


@functools.partial(jax.jit, static_argnames=("buckets",))
def logp_mismatch(sampler_logp, trainer_logp, mask, lengths, *, buckets: tuple[int, ...]) -> dict:
  """|sampler - trainer| log-prob of the sampled tokens: the token mean and max, and the token mean
  over the completions of each length bucket (lengths in (previous bound, bound]; NaN when empty).

  sampler_logp, trainer_logp, mask [B, N]; lengths [B] -> scalars.
  """
  diff = jnp.where(mask, jnp.abs(sampler_logp - trainer_logp), 0.0)
  out = {
    "logp_mismatch_mean": jnp.sum(diff) / jnp.maximum(jnp.sum(mask), 1),
    "logp_mismatch_max": jnp.max(diff),
  }
  low = 0
  for bound in buckets:
    rows = mask & ((lengths > low) & (lengths <= bound))[:, None]
    count = jnp.sum(rows)
    mean = jnp.sum(jnp.where(rows, diff, 0.0)) / jnp.maximum(count, 1)
    out[f"logp_mismatch_mean/len_le_{bound}"] = jnp.where(count > 0, mean, jnp.nan)
    low = bound
  return out


# ------------------------------------------------------------------------------- advantage card


@functools.partial(jax.jit, static_argnames=("spec",))
def advantage_card(spec: CardSpec, rewards, mask, estimator_state) -> tuple[AdvantageCard, jax.Array]:
  """Protocol -> estimator -> gate / zero-group rule (-> drop filter) on rewards [P, G].

  Returns the card and the rewards after the Protocol's binning [P, G].
  """
  binned, group_valid = protocol.apply(rewards, mask, delta_res=spec.delta_res, gate=spec.gate, binning=spec.binning)
  state = estimator_state if jax.tree.leaves(estimator_state) else None
  card = advantages.compute(spec.estimator, binned, mask, state=state, **dict(spec.params))
  card = protocol.apply_to_card(card, group_valid, zero_group=spec.zero_group)
  if spec.drop_collapsed:
    kept = ~collapsed_groups(rewards, mask, spec.collapse_std)
    card = card.replace(
      valid=card.valid & kept,
      kl_weight=jnp.where(kept, card.kl_weight, 0.0),
      advantages=jnp.where(kept[:, None], card.advantages, 0.0),
    )
  if card.state is None:
    card = card.replace(state={})
  return card, binned


def collapsed_groups(rewards, mask, collapse_std: float):
  """[P] bool: groups whose valid rewards have std (ddof 0) below `collapse_std` (or < 2 samples)."""
  r, m = groups.as_rewards_and_mask(rewards, mask)
  return (groups.std(r, m, ddof=0) < collapse_std) | (groups.count(m) < 2)


# ------------------------------------------------------------------------------- the update


def _minibatch_terms(spec: UpdateSpec, params, mb: Rollout, hp):
  """Loss sum (to differentiate) and metric sums of one microbatch."""
  n = spec.max_len or mb.tokens.shape[1]
  logp, entropy, lb = completion_pass(
    spec.model,
    spec.temperature,
    params,
    mb.prompt_ids,
    mb.prompt_mask,
    mb.tokens,
    mb.mask,
    spec.top_k,
    spec.top_p,
    spec.mesh,
    spec.rules,
  )
  weights = losses.SequenceWeights(mb.advantages, mb.kl_weight, mb.takes_part)
  beta = hp["beta"] if spec.kl_in_loss else 0.0
  pl = losses.policy_loss(
    logp,
    mb.old_logp,
    mb.ref_logp,
    weights,
    mb.loss_mask,
    beta=beta,
    kl_kind=spec.kl_kind,
    mode=spec.aggregation,
    surrogate=spec.surrogate,
    clip_low=hp["clip_low"],
    clip_high=hp["clip_high"],
    dual_clip=spec.dual_clip,
    max_len=n,
  )
  mask = mb.loss_mask & mb.takes_part[:, None]
  ent_sum, _ = losses.aggregate(entropy, mask, spec.aggregation, n)
  total = pl.total - hp["entropy_coef"] * ent_sum
  if spec.model.num_experts:
    total = total + hp["aux_coef"] * lb * pl.denominator
  tokens = jnp.sum(mask)
  clip = diagnostics.clip_fractions(logp, mb.old_logp, mb.advantages[:, None], mask, hp["clip_low"], hp["clip_high"])
  kl_old = jnp.sum(jnp.where(mask, losses.kl_penalty(logp, mb.old_logp, "k3"), 0.0))
  sums = dict(
    denominator=pl.denominator,
    loss=total,
    reward_loss=pl.reward,
    kl_loss=pl.kl,
    tokens=tokens.astype(jnp.float32),
    clip=clip["clip_frac"] * tokens,
    kl_old=kl_old,
  )
  return total, sums


def _update(spec: UpdateSpec, state: TrainState, batch: Rollout, hp: dict) -> tuple[TrainState, dict]:
  b = batch.tokens.shape[0]
  m, a = spec.minibatches, spec.grad_accum
  micro = b // (m * a)
  key = jax.random.fold_in(jax.random.wrap_key_data(state.rng), state.step)
  grad_fn = jax.grad(lambda p, mb: _minibatch_terms(spec, p, mb, hp), has_aux=True)

  def minibatch(carry, idx):  # idx [A, micro]
    params, opt_state = carry

    def micro_step(acc, ix):
      mb = constrain_rows(jax.tree.map(lambda x: x[ix], batch), spec.mesh, spec.rules)
      g, sums = grad_fn(params, mb)
      return jax.tree.map(jnp.add, acc, (g, sums)), None

    zero_sums = {
      k: jnp.zeros((), jnp.float32)
      for k in ("denominator", "loss", "reward_loss", "kl_loss", "tokens", "clip", "kl_old")
    }
    acc0 = (jax.tree.map(jnp.zeros_like, params), zero_sums)
    (g, sums), _ = jax.lax.scan(micro_step, acc0, idx)
    denom = jnp.maximum(sums["denominator"], 1e-9)
    g = jax.tree.map(lambda x: x / denom, g)
    grad_norm = optax.tree.norm(g)
    updates, new_opt_state = spec.optimizer.update(g, opt_state, params)
    new_params = optax.apply_updates(params, updates)
    # A non-finite loss or gradient norm must not reach the weights: that update is skipped (the
    # trainer logs the count and, with train.on_nonfinite="stop", stops).
    finite = jnp.isfinite(sums["loss"] / denom) & jnp.isfinite(grad_norm)
    params, opt_state = jax.tree.map(
      lambda n, o: jnp.where(finite, n, o), (new_params, new_opt_state), (params, opt_state)
    )
    tokens = jnp.maximum(sums["tokens"], 1.0)
    out = dict(
      nonfinite_updates=(~finite).astype(jnp.float32),
      loss=sums["loss"] / denom,
      reward_loss=sums["reward_loss"] / denom,
      kl_loss=sums["kl_loss"] / denom,
      clip_frac=sums["clip"] / tokens,
      kl_policy_old=sums["kl_old"] / tokens,
      grad_norm=grad_norm,
    )
    return (params, opt_state), out

  def epoch(carry, epoch_key):
    perm = jax.random.permutation(epoch_key, b).reshape(m, a, micro)
    return jax.lax.scan(minibatch, carry, perm)

  keys = jax.random.split(key, spec.ppo_epochs)
  (params, opt_state), per_update = jax.lax.scan(epoch, (state.params, state.opt_state), keys)
  metrics = jax.tree.map(jnp.mean, per_update)
  metrics["nonfinite_updates"] = jnp.sum(per_update["nonfinite_updates"])
  new_state = state.replace(step=state.step + 1, params=params, opt_state=opt_state)
  return new_state, metrics


_UPDATE_FNS: dict = {}


def update_fn(spec: UpdateSpec, shardings: TrainState):
  """The jitted update `(state, batch, hparams) -> (state, metrics)` with the state donated and
  its output shardings fixed to `shardings` (one compilation per spec and layout)."""
  leaves, treedef = jax.tree.flatten(shardings)
  key = (spec, treedef, tuple(leaves))
  if key not in _UPDATE_FNS:
    _UPDATE_FNS[key] = jax.jit(
      functools.partial(_update, spec),
      donate_argnums=(0,),
      out_shardings=(shardings, None),
      compiler_options=dense_pass_compiler_options(spec.model),
    )
  return _UPDATE_FNS[key]


# ------------------------------------------------------------------------------- metrics


@functools.partial(jax.jit, static_argnames=("delta_res", "kl_kind", "has_reference"))
def rollout_metrics(
  rewards,
  mask,
  card: AdvantageCard,
  tokens_mask,
  old_logp,
  ref_logp,
  entropy,
  lengths,
  truncated,
  *,
  delta_res: float,
  kl_kind: str,
  has_reference: bool,
) -> dict:
  """The per-step diagnostics of docs/DESIGN.md §3.5 from one batch (all scalars; `lowvar_*` over
  the low-variance updated groups, NaN when there are none).

  rewards, mask [P, G]; tokens_mask, old_logp, ref_logp, entropy [B, N]; lengths, truncated [B].
  """
  m = jnp.asarray(mask, jnp.float32)
  n = jnp.maximum(jnp.sum(m), 1.0)
  mean = jnp.sum(rewards * m) / n
  out = {
    "reward_mean": mean,
    "reward_std": jnp.sqrt(jnp.sum(jnp.square(rewards - mean) * m) / n),
    "acr": diagnostics.acr(rewards, mask),
    "zero_group_frac": diagnostics.zero_group_frac(card, mask),
    "subres_frac": diagnostics.subres_frac(rewards, mask, delta_res),
    "small_gap_frac": diagnostics.small_gap_frac(rewards, mask, delta_res),
    "valid_group_frac": jnp.mean(card.valid.astype(jnp.float32)),
    "entropy": jnp.sum(entropy) / jnp.maximum(jnp.sum(tokens_mask), 1),
    "response_len_mean": jnp.mean(lengths.astype(jnp.float32)),
    "truncated_frac": jnp.mean(truncated.astype(jnp.float32)),
    "adv_abs_mean": jnp.sum(jnp.abs(card.advantages)) / jnp.maximum(jnp.sum(mask), 1),
  }
  out.update(diagnostics.scale_percentiles(card))
  if has_reference:
    out.update(diagnostics.kl_stats(old_logp, ref_logp, tokens_mask, kl_kind))
    out.update(diagnostics.low_variance_stats(card, rewards, mask, tokens_mask, old_logp, ref_logp, kl_kind))
  else:
    out.update(kl_mean=jnp.zeros(()), kl_p95=jnp.zeros(()))
    lv = diagnostics.low_variance_stats(card, rewards, mask, tokens_mask, old_logp, old_logp, kl_kind)
    out.update(lv, lowvar_kl_mean=jnp.zeros(()), lowvar_kl_p95=jnp.zeros(()))
  return out


def _branch_losses(spec: UpdateSpec, params, batch: Rollout, weights, with_kl: bool, clip_low, clip_high):
  logp, _, _ = completion_pass(
    spec.model,
    spec.temperature,
    params,
    batch.prompt_ids,
    batch.prompt_mask,
    batch.tokens,
    batch.mask,
    spec.top_k,
    spec.top_p,
  )
  n = spec.max_len or batch.tokens.shape[1]
  mask = batch.loss_mask & weights.takes_part[:, None]
  if with_kl:
    s, d = losses.kl_branch(
      logp, batch.ref_logp, weights.kl_weight, mask, beta=1.0, kind=spec.kl_kind, mode=spec.aggregation, max_len=n
    )
  else:
    s, d = losses.reward_branch(
      logp,
      batch.old_logp,
      weights.advantages,
      mask,
      mode=spec.aggregation,
      surrogate=spec.surrogate,
      clip_low=clip_low,
      clip_high=clip_high,
      max_len=n,
    )
  return s / jnp.maximum(d, 1e-9)


@functools.partial(jax.jit, static_argnames=("spec", "group_size"))
def gradient_diagnostics(
  spec: UpdateSpec,
  group_size: int,
  params,
  batch: Rollout,
  card: AdvantageCard,
  rewards,
  mask,
  beta,
  *,
  clip_low,
  clip_high,
):
  """R/KL, cos(g_R, -g_KL) and Dir (against the cardinal s_q = 1 card) on the low-variance groups
  (updated groups with reward std < 1e-2) of this batch, at the current parameters. The reward
  branch is the run's surrogate with its clip range (`clip_low`, `clip_high`: loss.clip_low/high).

  Returns the metrics and the number of low-variance groups (the metrics are NaN when it is 0).
  """
  low = diagnostics.low_variance_groups(card, rewards, mask)
  rows = jnp.repeat(low, group_size)
  sample = jnp.asarray(mask, bool).reshape(-1)
  weights = losses.SequenceWeights(batch.advantages, batch.kl_weight, batch.takes_part & rows & sample)
  cardinal = diagnostics.cardinal_card(card)
  cw = losses.card_to_sequences(cardinal, mask)
  cw = cw._replace(takes_part=cw.takes_part & rows)
  out = diagnostics.gradient_diagnostics(
    lambda p: _branch_losses(spec, p, batch, weights, False, clip_low, clip_high),
    lambda p: _branch_losses(spec, p, batch, weights, True, clip_low, clip_high),
    params,
    beta,
    cardinal_reward_loss_fn=lambda p: _branch_losses(spec, p, batch, cw, False, clip_low, clip_high),
  )
  count = jnp.sum(low)
  out = {k: jnp.where(count > 0, v, jnp.nan) for k, v in out.items()}
  out["low_variance_groups"] = count.astype(jnp.float32)
  return out
