"""The RL train loop: `train(config, workdir)`.

One step (docs/DESIGN.md §1): P prompts x G samples -> the verifier pool scores them on the host while the
device computes the old and reference log-probs -> Protocol -> advantage card -> PPO epochs x
minibatches with exact gradient accumulation -> optax update -> metrics, cards, checkpoints.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import json
import logging
import os
import threading
import time
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from maxnorm_jax.core import advantages, losses
from maxnorm_jax.data import build_pipeline, load_tokenizer, make_format
from maxnorm_jax.evaluation import Evaluator, build_eval_sets, eval_prompt_rows
from maxnorm_jax.models import create_model, hf
from maxnorm_jax.parallel import make_mesh, replicated_array, rows_array, take_rows
from maxnorm_jax.rewards import VerifierPool
from maxnorm_jax.rewards import builtin as rewards_builtin
from maxnorm_jax.sampling import Categorical, generate_from_weights
from maxnorm_jax.sampling.sampler import check_finite
from maxnorm_jax.train import config_drift, specs
from maxnorm_jax.train import rollout as ro
from maxnorm_jax.train import sft as sft_lib
from maxnorm_jax.train import step as step_lib
from maxnorm_jax.train.checkpointing import Checkpointer, PreemptionFlag
from maxnorm_jax.train.config_check import ConfigError, validate
from maxnorm_jax.train.metrics import MetricWriter, eval_line, progress_bar, run_banner, save_card, sft_line
from maxnorm_jax.train.state import create_train_state, init_opt_state, state_shardings, weight_shardings

log = logging.getLogger("maxnorm_jax.train")


_plain = specs.plain


HF_HOME_ENV = "MAXNORM_HF_HOME"


def resolve_path(path: str, key: str) -> str:
  """`hf://org/name` -> $MAXNORM_HF_HOME/org/name (default ~/hf); the directory must exist and lie
  inside that folder (no absolute names, no "..", no link out of it)."""
  if not path.startswith("hf://"):
    return path
  home = os.path.expanduser(os.environ.get(HF_HOME_ENV, "~/hf"))
  name = path[len("hf://") :]
  resolved = os.path.join(home, name)
  inside = os.path.realpath(home).rstrip(os.sep) + os.sep
  if not name or os.path.isabs(name) or not os.path.realpath(resolved).startswith(inside):
    raise ValueError(f"config.{key}: {path} names a folder outside ${HF_HOME_ENV} ({home}); use hf://org/name")
  if not os.path.isdir(resolved):
    raise FileNotFoundError(
      f"config.{key}: {path} -> {resolved} does not exist; download the checkpoint there "
      f"(config.json, *.safetensors, tokenizer.json) or set ${HF_HOME_ENV}"
    )
  return resolved


@contextlib.contextmanager
def _timed(times: dict[str, float], name: str):
  """Adds the seconds the block takes to times[name]."""
  t0 = time.perf_counter()
  try:
    yield
  finally:
    times[name] = times.get(name, 0.0) + time.perf_counter() - t0


@dataclasses.dataclass
class _Passes:
  """A round's log-probs [B, N] (the update's old log-probs, entropy, reference) and a watcher thread that
  notes when the device finished them (the host meanwhile waits for the verifier), so the step can
  report how long the device sat idle waiting for rewards."""

  old_logp: jax.Array
  entropy: jax.Array
  ref_logp: jax.Array
  recomputed: jax.Array | None  # the trainer's old-policy log-probs when a pass computed them
  watcher: threading.Thread
  finished_at: list[float]

  @classmethod
  def start(cls, old_logp, entropy, ref_logp, recomputed=None) -> _Passes:
    finished_at: list[float] = []

    def watch():
      jax.block_until_ready((old_logp, ref_logp, recomputed))
      finished_at.append(time.perf_counter())

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    return cls(old_logp, entropy, ref_logp, recomputed, watcher, finished_at)

  def wait(self) -> float:
    """Blocks until the passes are done -> the perf_counter time they finished."""
    self.watcher.join()
    return self.finished_at[0]


class Trainer:
  """Everything one run holds: mesh, data, verifier pool, state, reference, writers."""

  def __init__(self, config: Any, workdir: str):
    validate(config)
    self.config = config
    self.workdir = workdir
    self.is_main = jax.process_index() == 0
    c = config
    try:
      self.mesh = make_mesh(dict(c.mesh))
    except ValueError as e:
      raise ValueError(f"config.{e}") from None
    self.rules = specs.rules_of(c)
    self.tokenizer = load_tokenizer(resolve_path(c.data.tokenizer, "data.tokenizer"))
    self.eos_id = self.tokenizer.eos_id
    self.pad_id = self.tokenizer.pad_id if self.tokenizer.pad_id is not None else (self.eos_id or 0)
    self.num_prompts = c.data.batch_size  # P
    self.group_size = c.rollout.group_size  # G
    self.max_new_tokens = c.rollout.max_new_tokens  # N
    self.num_rows = self.num_prompts * self.group_size  # B = P * G sequences a step
    self.task_default = c.reward.verifier

    # ---- data (every process reads the whole global batch of prompts)
    fmt = (
      {"kind": "plain"} if c.data.prompt_format == "plain" else {"kind": "chat", "system": c.data.system_prompt or None}
    )
    self.fields = c.data.fields or None
    self.source = self._resolve_source(c.data.source)
    # Rows the verifier cannot score (unknown task, unparsable answer) fail at load time, by file and line.
    self.check_record = functools.partial(rewards_builtin.check_record, default_task=self.task_default)
    self.first_rejection: str | None = None
    self.prompt_format = make_format(fmt)
    self.pipeline = self._prompt_pipeline(self.num_prompts, c.seed)

    # ---- model, optimiser, state
    if c.model.kind == "tiny":
      self.model_cfg = specs.tiny_model_config(c, self.tokenizer.vocab_size)
      params = create_model(self.model_cfg, self.mesh, self.rules, seed=c.seed).weights()
    else:
      model = hf.load(
        resolve_path(c.model.path, "model.path"),
        c.model.param_dtype,
        mesh=self.mesh,
        rules=self.rules,
        compute_dtype=c.model.dtype,
        remat=c.model.remat,
        attention_chunk=c.model.attention_chunk,
      )
      self.model_cfg, params = model.config, model.weights()
    self.param_shardings = weight_shardings(self.model_cfg, self.mesh, self.rules)
    self.optimizer = specs.optimizer_of(c)
    est_state = advantages.initial_state(c.advantage.estimator)
    self.state = create_train_state(params, self.optimizer, c.seed, est_state, self.mesh)
    self.use_reference = c.loss.beta > 0
    self.reference = None

    self.card_spec = step_lib.CardSpec(
      estimator=c.advantage.estimator,
      params=tuple(sorted(_plain(c.advantage.params).items())),
      delta_res=float(c.protocol.delta_res),
      gate=bool(c.protocol.gate),
      binning=bool(c.protocol.binning),
      zero_group=c.protocol.zero_group,
      drop_collapsed=c.filter.mode == "drop",
      collapse_std=float(c.filter.collapse_std),
    )
    self.update_spec = specs.update_spec_of(c, self.model_cfg, self.mesh, self.rules, self.optimizer)
    self.hparams = {
      k: replicated_array(np.float32(v), self.mesh) for k, v in specs.hparam_values(c, self.model_cfg).items()
    }
    self.sample_method = Categorical(
      temperature=float(c.rollout.temperature), top_p=float(c.rollout.top_p), top_k=int(c.rollout.top_k)
    )
    self.pool = VerifierPool(
      num_workers=c.reward.num_workers,
      timeout_s=c.reward.timeout_s if c.reward.timeout_s > 0 else None,
      memory_mb=c.reward.worker_memory_mb or None,
    )
    self.eval_sets = build_eval_sets(
      c,
      train_source=self.source,
      train_pipeline=self.pipeline,
      tokenizer=self.tokenizer,
      fields=self.fields,
      prompt_format=self.prompt_format,
      resolve_source=self._resolve_source,
    )
    self.evaluator = Evaluator(
      self.eval_sets,
      sample=self._sample,
      pool=self.pool,
      tokenizer=self.tokenizer,
      record=self._record,
      n=c.eval.k,
      temperature=c.eval.temperature,
      pass_k=tuple(c.eval.pass_k),
      num_resamples=c.eval.bootstrap_resamples,
      seed=c.seed,
    )
    self.checkpointer = Checkpointer(workdir, max_to_keep=c.checkpoint.max_to_keep)
    self.preemption = PreemptionFlag(install=c.checkpoint.on_preemption)
    self.step = 0
    self.timings: dict[str, float] = {}

  # ------------------------------------------------------------------------------ set-up helpers

  def _resolve_source(self, source: str) -> str:
    if source.startswith("sample:"):
      from maxnorm_jax.data import SAMPLE_FILES

      name = source.split(":", 1)[1]
      if name not in SAMPLE_FILES:
        raise ValueError(f"config.data.source: unknown sample {name!r}; known: {sorted(SAMPLE_FILES)}")
      return SAMPLE_FILES[name]
    return source

  def _prompt_pipeline(self, batch_size: int, seed: int):
    """The training source's prompt pipeline (the RL batches and the SFT warm start), without the
    held-out split."""
    data = self.config.data
    return build_pipeline(
      self.source,
      tokenizer=self.tokenizer,
      batch_size=batch_size,
      fields=self.fields,
      prompt_format=self.prompt_format,
      seed=seed,
      shard_index=0,
      shard_count=1,
      skip_bad_rows=data.skip_bad_rows,
      max_prompt_len=data.max_prompt_len,
      builtin_n=data.builtin_n or None,
      **self._holdout(),
      check_record=self.check_record,
    )

  def _holdout(self) -> dict:
    """The held-out split of a file dataset without data.eval_source (docs/DESIGN.md §3.8): training never
    sees it, also after a resume (the split is a function of the prompt texts alone)."""
    c = self.config
    if c.data.eval_source or self.source.startswith("builtin:"):
      return {}
    return dict(holdout_fraction=float(c.data.eval_fraction), holdout_cap=int(c.eval.num_prompts))

  def _record(self, r: dict) -> dict:
    if "task" not in r or r["task"] is None:
      r = {**r, "task": self.task_default}
    return r

  # ------------------------------------------------------------------------------ sampling + scoring

  def _sample(self, params, prompt_ids: np.ndarray, prompt_mask: np.ndarray, key, method, num_samples: int = 1):
    """Samples `num_samples` completions of each prompt [P, L] (one shared prefill per prompt) ->
    (prompt ids, prompt mask) repeated to the P * num_samples rows, prompt-major, and the SampleOutput."""
    ids = rows_array(prompt_ids, self.mesh, self.rules)
    mask = rows_array(prompt_mask, self.mesh, self.rules)
    out = generate_from_weights(
      self.model_cfg,
      params,
      ids,
      mask,
      key,
      self.max_new_tokens,
      method=method,
      eos_id=self.eos_id,
      pad_id=self.pad_id,
      num_samples=num_samples,
      mesh=self.mesh,
      rules=self.rules,
      chunks=self.config.rollout.sample_chunks,
      compact_every=self.config.rollout.compact_every,
    )
    if num_samples > 1:
      ids = rows_array(np.repeat(prompt_ids, num_samples, axis=0), self.mesh, self.rules)
      mask = rows_array(np.repeat(prompt_mask, num_samples, axis=0), self.mesh, self.rules)
    return ids, mask, out

  def _submit(self, out, records: list[dict]):
    """Decodes this process's rows of `out` and queues them on the pool -> (handle, row indices)."""
    check_finite(out)  # garbage token ids from a diverged policy must not reach the tokenizer
    tokens, idx = ro.local_rows(out.tokens)
    lengths, _ = ro.local_rows(out.lengths)
    texts = ro.decode_rows(self.tokenizer, tokens, lengths)
    items = [(t, self._record(records[i])) for t, i in zip(texts, idx)]
    return self.pool.submit(items), idx

  def _collect(self, handle, idx, total: int, interruptible: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """Waits for the scores (RuntimeError if the pool broke; InterruptedError on SIGTERM when
    `interruptible`) -> rewards [total], valid [total]."""
    # One process alone must not leave the step (the others would wait in a collective).
    stop = self.preemption.is_set if interruptible and jax.process_count() == 1 else None
    self.pool.wait(handle, interrupted=stop)
    rewards, valid, _ = handle.arrays()
    if self.first_rejection is None and not valid.all():
      score = handle.result(0)[int(np.flatnonzero(~valid)[0])]
      self.first_rejection = repr(score.info)[:500]
      log.warning("the first rejected score of this run (left out of its group): %s", self.first_rejection)
    return ro.gather_rows(rewards, idx, total), ro.gather_rows(valid, idx, total)

  def _rollout_round(self, params, key):
    batch = next(self.pipeline)

    def rep(x):
      return np.repeat(x, self.group_size, axis=0)

    records = [r for r in batch["records"] for _ in range(self.group_size)]
    prompt_ids, prompt_mask = batch["prompt_ids"], batch["prompt_mask"]
    if self.config.rollout.length_buckets:
      prompt_ids, prompt_mask = ro.trim_left_padding(prompt_ids, prompt_mask)
    if self.config.rollout.shared_prefill:
      ids, mask, out = self._sample(params, prompt_ids, prompt_mask, key, self.sample_method, self.group_size)
    else:
      ids, mask, out = self._sample(params, rep(prompt_ids), rep(prompt_mask), key, self.sample_method)
    return dict(ids=ids, mask=mask, out=out, records=records)

  # ------------------------------------------------------------------------------ one RL step

  def rl_step(self) -> dict:
    """One RL step (docs/DESIGN.md §1): sample, score, Protocol and card, update -> its metrics."""
    config = self.config
    t_start = time.perf_counter()
    times: dict[str, float] = {}
    metrics: dict[str, Any] = {}
    base = jax.random.fold_in(jax.random.key(config.seed), self.step)
    self.data_state_at_step_start = self.pipeline.get_state()  # what a SIGTERM mid-step saves
    params = self.state.params
    if config.filter.mode == "resample":
      chosen, rewards, valid = self._resample_rounds(params, base, times, metrics)
      with _timed(times, "logprobs"):
        passes = self._logprobs(params, chosen)
        passes.wait()
      metrics["time/device_wait_verifier"] = times["verify"]
    else:
      chosen, rewards, valid, passes = self._score_overlapped(params, base, times, metrics)

    rewards_pg, sample_mask = self._shaped_rewards(rewards, valid, chosen["out"])
    if self.use_reference and config.loss.kl_in == "reward":
      seq_kl = np.asarray(jax.device_get(_sequence_kl(passes.old_logp, passes.ref_logp, chosen["out"].mask)))
      rewards_pg = rewards_pg - config.loss.beta * seq_kl.reshape(self.num_prompts, self.group_size)
    card, binned = step_lib.advantage_card(
      self.card_spec, jnp.asarray(rewards_pg), jnp.asarray(sample_mask), self.state.estimator_state
    )
    batch = self._update_batch(chosen, passes, card, sample_mask)
    roll = self._rollout_metrics(chosen["out"], passes, card, rewards_pg, sample_mask, metrics)
    diag = self._gradient_diagnostics(params, batch, card, rewards_pg, sample_mask)
    self._maybe_save_card(card, binned, rewards_pg, sample_mask)

    with _timed(times, "update"):
      self.state = self.state.replace(estimator_state=card.state)
      update = step_lib.update_fn(self.update_spec, state_shardings(self.state))
      self.state, upd = update(self.state, batch, self.hparams)
      upd = jax.device_get(upd)
    self.step += 1

    metrics.update(jax.device_get(roll))
    metrics.update(upd)
    if diag is not None:
      metrics.update(jax.device_get(diag))
    metrics = {k: float(np.asarray(v)) for k, v in metrics.items()}
    metrics["reward_raw_mean"] = float(rewards.mean())
    metrics["rejected"] = float((~valid).sum())
    metrics.update({f"time/{k}": times[k] for k in ("generate", "verify", "logprobs", "update")})
    metrics["time/step"] = time.perf_counter() - t_start
    metrics["time/device_wait_verifier_frac"] = metrics["time/device_wait_verifier"] / metrics["time/step"]
    return metrics

  def _sample_and_submit(self, params, key, times: dict) -> tuple[dict, Any, np.ndarray]:
    """One rollout round, queued on the verifier pool -> (round, pool handle, row indices)."""
    with _timed(times, "generate"):
      rollout = self._rollout_round(params, key)
      handle, idx = self._submit(rollout["out"], rollout["records"])
    return rollout, handle, idx

  def _score_overlapped(self, params, base, times: dict, metrics: dict):
    """One round; its log-prob passes run on the device while the host waits for the verifier.
    -> (round, rewards [B], valid [B], passes)."""
    chosen, handle, idx = self._sample_and_submit(params, jax.random.fold_in(base, 0), times)
    chosen = self._trim_completions(chosen)
    t_dispatch = time.perf_counter()
    passes = self._logprobs(params, chosen)
    with _timed(times, "verify"):
      rewards, valid = self._collect(handle, idx, self.num_rows, interruptible=True)
    t_rewards = time.perf_counter()
    finished_at = passes.wait()
    times["logprobs"] = finished_at - t_dispatch  # device time of the passes, overlapping `verify`
    metrics["time/device_wait_verifier"] = max(0.0, t_rewards - finished_at)
    return chosen, rewards, valid, passes

  def _resample_rounds(self, params, base, times: dict, metrics: dict):
    """DAPO's dynamic sampling: rounds until num_prompts groups with contrast were kept (or
    filter.max_rounds) -> (the chosen groups as one round, rewards [B], valid [B])."""
    config = self.config
    rounds, scored, kept = [], [], []
    while not rounds or (sum(int(k.sum()) for k in kept) < self.num_prompts and len(rounds) < config.filter.max_rounds):
      rollout, handle, idx = self._sample_and_submit(params, jax.random.fold_in(base, len(rounds)), times)
      with _timed(times, "verify"):
        rewards, valid = self._collect(handle, idx, self.num_rows, interruptible=True)
      rounds.append(rollout)
      scored.append((rewards, valid))
      shaped = self._shaped_rewards(rewards, valid, rollout["out"])
      kept.append(ro.select_groups(*shaped, config.filter.collapse_std))
    which, grp, n_kept = ro.fill_from_rounds(kept, self.num_prompts)
    metrics["filter/rounds"] = float(len(rounds))
    metrics["filter/rollout_cost"] = float(len(rounds))
    metrics["filter/kept_frac"] = n_kept / self.num_prompts
    chosen, rewards, valid = self._assemble(rounds, scored, which, grp)
    return self._trim_completions(chosen), rewards, valid

  def _trim_completions(self, chosen: dict) -> dict:
    """With rollout.length_buckets, the completions [B, N] cut to [B, W]: W the `pad_width` of the
    longest one (positions past it are masked everywhere, and Dr.GRPO's constant stays N)."""
    out = chosen["out"]
    if not self.config.rollout.length_buckets:
      return chosen
    lengths = ro.gather_rows(*ro.local_rows(out.lengths), self.num_rows)
    width = ro.pad_width(int(lengths.max()), self.max_new_tokens)
    if width == self.max_new_tokens:
      return chosen
    out = out.replace(tokens=out.tokens[:, :width], logprobs=out.logprobs[:, :width], mask=out.mask[:, :width])
    return {**chosen, "out": out}

  def _update_batch(self, chosen, passes, card, sample_mask: np.ndarray) -> step_lib.Rollout:
    """The update's batch: the chosen round, its log-probs and the card's per-sequence weights."""
    out = chosen["out"]
    weights = losses.card_to_sequences(card, sample_mask)
    return step_lib.Rollout(
      prompt_ids=chosen["ids"],
      prompt_mask=chosen["mask"],
      tokens=out.tokens,
      mask=out.mask,
      loss_mask=out.mask & rows_array(sample_mask.reshape(-1, 1), self.mesh, self.rules),
      old_logp=passes.old_logp,
      ref_logp=passes.ref_logp,
      advantages=self._rows(weights.advantages),
      kl_weight=self._rows(weights.kl_weight),
      takes_part=self._rows(weights.takes_part),
    )

  def _rollout_metrics(self, out, passes, card, rewards_pg: np.ndarray, sample_mask: np.ndarray, metrics: dict):
    """The per-step diagnostics (docs/DESIGN.md §3.5), still on the device."""
    config = self.config
    if config.filter.mode == "drop":
      metrics["filter/kept_frac"] = jnp.mean(
        ~step_lib.collapsed_groups(jnp.asarray(rewards_pg), jnp.asarray(sample_mask), config.filter.collapse_std)
      )
    if passes.recomputed is not None and self._diagnostics_step():
      metrics.update(
        step_lib.logp_mismatch(
          out.logprobs,
          passes.recomputed,
          out.mask,
          out.lengths,
          buckets=step_lib.length_buckets(self.max_new_tokens),
        )
      )
    return step_lib.rollout_metrics(
      jnp.asarray(rewards_pg),
      jnp.asarray(sample_mask),
      card,
      out.mask,
      passes.old_logp,
      passes.ref_logp,
      passes.entropy,
      out.lengths,
      out.truncated,
      delta_res=float(config.protocol.delta_res),
      kl_kind=config.loss.kl_kind,
      has_reference=self.use_reference,
    )

  def _diagnostics_step(self) -> bool:
    every = self.config.log.diagnostics_every
    return bool(every) and (self.step + 1) % every == 0

  def _gradient_diagnostics(self, params, batch, card, rewards_pg: np.ndarray, sample_mask: np.ndarray):
    """R/KL, Dir and cos on the low-variance groups every log.diagnostics_every steps, else None."""
    if not self._diagnostics_step():
      return None
    return step_lib.gradient_diagnostics(
      self.update_spec,
      self.group_size,
      params,
      batch,
      card,
      jnp.asarray(rewards_pg),
      jnp.asarray(sample_mask),
      jnp.float32(max(self.config.loss.beta, 1e-12)),
      clip_low=self.hparams["clip_low"],
      clip_high=self.hparams["clip_high"],
    )

  def _maybe_save_card(self, card, binned, rewards_pg: np.ndarray, sample_mask: np.ndarray) -> None:
    every = self.config.log.cards_every
    if not (every and (self.step + 1) % every == 0 and self.is_main):
      return
    save_card(
      self.workdir,
      self.step + 1,
      dict(
        rewards=rewards_pg,
        protocol_rewards=np.asarray(binned),
        mask=sample_mask,
        numerator=np.asarray(card.numerator),
        scale=np.asarray(card.scale),
        advantages=np.asarray(card.advantages),
        kl_weight=np.asarray(card.kl_weight),
        valid=np.asarray(card.valid),
      ),
    )

  def _rows(self, x) -> jax.Array:
    return rows_array(np.asarray(x), self.mesh, self.rules)

  def _shaped_rewards(self, rewards: np.ndarray, valid: np.ndarray, out) -> tuple[np.ndarray, np.ndarray]:
    """Rewards [P, G] with DAPO's overlong shaping, and the sample mask [P, G] (rejected scores and,
    with overlong.mask_truncated, truncated completions are masked)."""
    c = self.config
    rewards = rewards.astype(np.float32)
    mask = valid.copy()
    if c.overlong.penalty or c.overlong.mask_truncated:
      lengths = ro.gather_rows(*ro.local_rows(out.lengths), self.num_rows)
      truncated = ro.gather_rows(*ro.local_rows(out.truncated), self.num_rows)
      if c.overlong.penalty:
        rewards = rewards + ro.overlong_penalty(
          lengths, self.max_new_tokens, c.overlong.buffer_len, c.overlong.penalty_factor
        )
      if c.overlong.mask_truncated:
        mask = mask & ~truncated
    rewards = np.where(mask, rewards, 0.0).astype(np.float32)
    return rewards.reshape(self.num_prompts, self.group_size), mask.reshape(self.num_prompts, self.group_size)

  def _logprobs(self, params, chosen) -> _Passes:
    """Dispatches a round's log-prob passes (not waiting for them): the reference's, and the old
    policy's with rollout.old_logp="recompute" or on a diagnostics step (to log the mismatch).
    With "sampler" the update's old log-probs are the sampler's and the logged entropy is the
    Monte Carlo estimate -log p of the sampled tokens."""
    out = chosen["out"]
    temperature = float(self.config.rollout.temperature)
    microbatches = self.config.train.logprob_microbatches

    def score(weights):
      return step_lib.logprobs_fn(self.model_cfg)(
        self.model_cfg,
        temperature,
        weights,
        chosen["ids"],
        chosen["mask"],
        out.tokens,
        out.mask,
        microbatches,
        top_k=self.update_spec.top_k,
        top_p=self.update_spec.top_p,
        mesh=self.update_spec.mesh,
        rules=self.update_spec.rules,
      )

    recompute = self.config.rollout.old_logp == "recompute"
    recomputed, entropy = score(params) if recompute or self._diagnostics_step() else (None, None)
    old_logp = recomputed if recompute else out.logprobs
    if not recompute:
      entropy = -out.logprobs  # 0 off the mask
    ref_logp = score(self.reference)[0] if self.use_reference else old_logp
    return _Passes.start(old_logp, entropy, ref_logp, recomputed)

  def _assemble(self, rounds, scored, which: np.ndarray, grp: np.ndarray):
    """The batch of the chosen groups (round `which[q]`, group `grp[q]`) as one rollout."""
    rows = (grp[:, None] * self.group_size + np.arange(self.group_size)[None, :]).reshape(-1)
    rounds_of_rows = np.repeat(which, self.group_size)
    rewards = np.concatenate([s[0] for s in scored])[rounds_of_rows * self.num_rows + rows]
    valid = np.concatenate([s[1] for s in scored])[rounds_of_rows * self.num_rows + rows]
    flat = rounds_of_rows * self.num_rows + rows
    take = replicated_array(flat.astype(np.int32), self.mesh)

    def pick(xs):
      return take_rows(jnp.concatenate(xs, axis=0), take, self.mesh, self.rules)

    def left_pad(x, width: int, value):  # rounds may have trimmed their prompts to different widths
      return jnp.pad(x, ((0, 0), (width - x.shape[1], 0)), constant_values=value)

    width = max(r["ids"].shape[1] for r in rounds)
    outs = [r["out"] for r in rounds]
    out = jax.tree.map(lambda *xs: pick(list(xs)) if xs[0].ndim else xs[0], *outs)
    ids = pick([left_pad(r["ids"], width, self.pad_id) for r in rounds])
    chosen = dict(ids=ids, mask=pick([left_pad(r["mask"], width, False) for r in rounds]), out=out)
    return chosen, rewards, valid

  # ------------------------------------------------------------------------------ evaluation

  def evaluate(self, with_details: bool = False):
    """The metrics of every evaluation set at the current step (`maxnorm_jax.evaluation.Evaluator`);
    with_details: (metrics, one row per prompt with its samples, rewards and answers)."""
    metrics, details = {}, []
    sets = self.evaluator.sets
    bar = progress_bar(sets, len(sets), f"eval step {self.step}", self.config.log.progress and self.is_main)
    for i, s in enumerate(bar):
      m, d = self.evaluator.run_set(self.state.params, s, self.step, i)
      metrics.update(m)
      details += d
    return (metrics, details) if with_details else metrics

  # ------------------------------------------------------------------------------ SFT warm start

  def sft_warm_start(self) -> list[float]:
    c = self.config
    if not c.sft.steps:
      return []
    it = self._prompt_pipeline(c.sft.batch_size, c.seed + 17)
    opt = sft_lib.sft_optimizer(float(c.sft.lr), int(c.sft.warmup_steps), int(c.sft.steps))
    params = self.state.params
    opt_state = init_opt_state(opt, params, self.mesh)
    losses_ = []
    bar = progress_bar(range(c.sft.steps), c.sft.steps, "SFT", c.log.progress and self.is_main)
    for i in bar:
      b = next(it)
      ids, mask = sft_lib.answer_tokens(self.tokenizer, b["records"], self.max_new_tokens, self.eos_id, self.pad_id)
      params, opt_state, loss = sft_lib.sft_step(
        self.model_cfg,
        opt,
        params,
        opt_state,
        self._rows(b["prompt_ids"]),
        self._rows(b["prompt_mask"]),
        self._rows(ids),
        self._rows(mask),
      )
      losses_.append(loss)
      if hasattr(bar, "set_postfix") and (i + 1) % 10 == 0:
        bar.set_postfix({"loss": float(loss)}, refresh=False)  # a replicated scalar, every 10th step
    params = jax.tree.map(lambda x, s: jax.device_put(x, s), params, self.param_shardings)
    self.state = create_train_state(params, self.optimizer, c.seed, self.state.estimator_state, self.mesh)
    return [float(x) for x in jax.device_get(losses_)]

  # ------------------------------------------------------------------------------ checkpoints

  def save(self, data_state: dict | None = None) -> None:
    data_state = self.pipeline.get_state() if data_state is None else data_state
    reference = self.reference if self.use_reference else None
    self.checkpointer.save(self.step, self.state, data_state, reference, config=config_drift.plain(self.config))

  def restore_or_start(self) -> bool:
    """Restores the newest intact checkpoint (True) or warm-starts a new run (False). Refuses
    (ConfigError naming each key) a checkpoint saved with a config that differs in a key that
    changes the experiment, unless `checkpoint.allow_changed` lists it."""
    if self.use_reference:
      self.reference = jax.tree.map(jnp.copy, self.state.params)
    restored = self.checkpointer.restore_intact(self.state, self.reference)
    if restored is None:
      return False
    if restored.config is not None:
      allowed = config_drift.allowed_keys(self.config.checkpoint.allow_changed)
      changed = config_drift.differences(restored.config, config_drift.plain(self.config), allowed)
      if changed:
        raise ConfigError(
          f"config: this workdir's checkpoint (step {restored.step}) was trained with a different config; "
          "refusing to mix two experiments in one run. Changed: " + "; ".join(changed) + ". Use a new "
          "--workdir, or list keys that are safe to change in --config.checkpoint.allow_changed (e.g. train.steps)."
        )
    self.state, self.reference = restored.state, restored.reference
    self.pipeline.set_state(restored.data_state)
    self.step = restored.step
    return True

  def load_reference(self) -> None:
    """The frozen reference: the weights RL starts from, or `config.reference` (an HF directory)."""
    if not self.use_reference:
      return
    if self.config.reference == "init":
      self.reference = jax.tree.map(jnp.copy, self.state.params)
    else:
      model = hf.load(
        resolve_path(self.config.reference, "reference"),
        self.config.model.param_dtype,
        mesh=self.mesh,
        rules=self.rules,
      )
      self.reference = model.weights()

  def close(self) -> None:
    self.pool.close()
    self.checkpointer.close()
    self.preemption.restore()


@jax.jit
def _sequence_kl(old_logp, ref_logp, mask):
  """Per-sequence sum of k1 = old - ref over the completion [B] (KL in the reward)."""
  return jnp.sum(jnp.where(mask, old_logp - ref_logp, 0.0), axis=-1)


def _print_eval(trainer: Trainer, step: int, metrics: dict) -> None:
  if trainer.is_main:
    print(eval_line(step, metrics), flush=True)


def _check_rejections(c, step: int, metrics: dict, first_reason: str | None) -> None:
  """A loud warning (an error with reward.on_rejected="stop") when more than reward.max_rejected_frac
  of the step's samples got no valid score: the batch then trains on little or no signal."""
  frac = metrics.get("rejected", 0.0) / (c.data.batch_size * c.rollout.group_size)
  if frac <= c.reward.max_rejected_frac:
    return
  message = (
    f"step {step}: {frac:.0%} of the samples got no valid score (over reward.max_rejected_frac="
    f"{c.reward.max_rejected_frac}); the first rejection of the run: {first_reason}"
  )
  if c.reward.on_rejected == "stop":
    raise RuntimeError(message + "; stopping as config.reward.on_rejected='stop' asks")
  log.warning("WARNING %s", message)


def _check_nonfinite(c, step: int, metrics: dict) -> None:
  """Logs updates skipped for a non-finite loss or gradient norm; raises if train.on_nonfinite="stop"."""
  skipped = int(metrics.get("nonfinite_updates", 0))
  if not skipped:
    return
  total = c.train.ppo_epochs * c.train.minibatches
  log.warning(
    "step %d: %d of %d updates had a non-finite loss or gradient norm and were skipped (train.on_nonfinite=%r)",
    step,
    skipped,
    total,
    c.train.on_nonfinite,
  )
  if c.train.on_nonfinite == "stop":
    raise FloatingPointError(
      f"step {step}: {skipped} of {total} updates had a non-finite loss or gradient norm; stopping as "
      "config.train.on_nonfinite='stop' asks (the weights were not changed by them; the last checkpoint is intact)"
    )


#: The exit status of `python -m maxnorm_jax.main` after a SIGTERM stop (saved, not finished);
#: 75 is EX_TEMPFAIL: run the same command again to resume.
PREEMPTED_EXIT_CODE = 75
#: Written into the workdir when a run reached train.steps (launch/sweep.py skips such cells).
FINISHED_FILE = "FINISHED.json"


class Preempted(Exception):
  """SIGTERM stopped the run after saving step `step`; `rows` are the metric rows it logged."""

  def __init__(self, step: int, rows: list[dict]):
    super().__init__(f"preempted: step {step} saved; run the same command again to resume")
    self.step, self.rows = step, rows


def train(config: Any, workdir: str) -> list[dict]:
  """Trains from `config` into `workdir` (resuming from its newest intact checkpoint); returns the
  metric rows this call logged (process 0; other processes return their own copies). Raises
  `Preempted` after a SIGTERM stop (the step is saved) and writes FINISHED_FILE when done."""
  os.makedirs(workdir, exist_ok=True)
  trainer = Trainer(config, workdir)
  c = config
  rows: list[dict] = []
  writer = None
  preempted = False
  finished = os.path.join(workdir, FINISHED_FILE)
  try:
    resumed = trainer.restore_or_start()
    if trainer.is_main:  # only now: a refused resume must leave the original config.json in place
      with open(os.path.join(workdir, "config.json"), "w") as f:
        json.dump(config_drift.plain(c), f, indent=2)
      with open(os.path.join(workdir, "eval_prompts.jsonl"), "w") as f:
        f.writelines(json.dumps(row) + "\n" for row in eval_prompt_rows(trainer.eval_sets))
      if os.path.exists(finished) and trainer.step < c.train.steps:
        os.remove(finished)  # an extended run (more train.steps) is unfinished again
    if trainer.is_main:
      print(run_banner(workdir, c.log.tensorboard), flush=True)
    writer = MetricWriter(
      workdir,
      c.train.steps,
      enabled=trainer.is_main,
      tensorboard=c.log.tensorboard,
      progress=c.log.progress,
      resume_step=trainer.step,
    )
    if not resumed:
      sft_losses = trainer.sft_warm_start()
      trainer.load_reference()
      if sft_losses and trainer.is_main:
        print(sft_line(sft_losses), flush=True)
      if c.eval.every:
        first = {**trainer.evaluate()}
        _print_eval(trainer, 0, first)
        if sft_losses:
          first["sft/loss_first"], first["sft/loss_last"] = sft_losses[0], sft_losses[-1]
        rows.append(writer.write(0, first))
    else:
      log.warning("resumed from step %d", trainer.step)
    while trainer.step < c.train.steps:
      counts = (trainer.pool.timeouts, trainer.pool.crashes)
      try:
        metrics = trainer.rl_step()
      except InterruptedError:
        log.warning("SIGTERM while waiting for the verifier: saving step %d and stopping", trainer.step)
        if trainer.checkpointer.latest_step() != trainer.step:
          trainer.save(trainer.data_state_at_step_start)
        preempted = True
        break
      metrics["verify/timeouts"] = float(trainer.pool.timeouts - counts[0])
      metrics["verify/crashes"] = float(trainer.pool.crashes - counts[1])
      _check_nonfinite(c, trainer.step, metrics)
      _check_rejections(c, trainer.step, metrics, trainer.first_rejection)
      if c.eval.every and (trainer.step % c.eval.every == 0 or trainer.step == c.train.steps):
        metrics.update(trainer.evaluate())
        _print_eval(trainer, trainer.step, metrics)
      rows.append(writer.write(trainer.step, metrics))
      if c.checkpoint.every and trainer.step % c.checkpoint.every == 0:
        trainer.save()
      if c.checkpoint.on_preemption and trainer.preemption.agreed():
        log.warning("SIGTERM: saving step %d and stopping", trainer.step)
        if trainer.checkpointer.latest_step() != trainer.step:
          trainer.save()
        preempted = True
        break
    else:
      if trainer.checkpointer.latest_step() != trainer.step:
        trainer.save()
  finally:
    if writer is not None:
      writer.close()
    trainer.close()
  if preempted:
    raise Preempted(trainer.step, rows)
  if trainer.is_main:
    with open(finished, "w") as f:
      json.dump({"step": trainer.step}, f)
  return rows
