"""SFT warm start: cross-entropy on the task's reference answers, before any RL step."""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
import optax

from maxnorm_jax.models.config import ModelConfig
from maxnorm_jax.train.step import completion_pass


def answer_tokens(tokenizer, records, length: int, eos_id: int, pad_id: int) -> tuple[np.ndarray, np.ndarray]:
  """Each record's reference answer then eos, right-padded / cut to `length`: ids, mask [P, length]."""
  ids = np.full((len(records), length), pad_id, np.int32)
  mask = np.zeros((len(records), length), bool)
  for i, r in enumerate(records):
    answer = r.get("answer")
    if answer is None:
      raise ValueError(
        f"SFT warm start needs reference answers: record {r.get('location', i)} has none (set sft.steps=0)"
      )
    t = (tokenizer.encode(str(answer)) + [eos_id])[:length]
    ids[i, : len(t)] = t
    mask[i, : len(t)] = True
  return ids, mask


@functools.partial(jax.jit, static_argnames=("cfg", "optimizer"), donate_argnums=(2, 3))
def sft_step(cfg: ModelConfig, optimizer, params, opt_state, prompt_ids, prompt_mask, tokens, mask):
  """One step of mean token cross-entropy on the answers; returns (params, opt_state, loss)."""

  def loss_fn(p):
    logp, _, _ = completion_pass(cfg, 1.0, p, prompt_ids, prompt_mask, tokens, mask)
    return -jnp.sum(logp) / jnp.maximum(jnp.sum(mask), 1)

  loss, grads = jax.value_and_grad(loss_fn)(params)
  updates, opt_state = optimizer.update(grads, opt_state, params)
  return optax.apply_updates(params, updates), opt_state, loss


@functools.lru_cache(maxsize=16)
def sft_optimizer(lr: float, warmup_steps: int, steps: int) -> optax.GradientTransformation:
  sched = optax.warmup_cosine_decay_schedule(
    0.0, lr, max(warmup_steps, 1), max(steps, warmup_steps + 1), end_value=lr * 0.1
  )
  return optax.chain(optax.clip_by_global_norm(1.0), optax.adamw(sched, weight_decay=0.0))
