"""The trainer's evaluation: greedy and n sampled completions per prompt of every evaluation set,
scored by the run's verifier pool, summarised into metrics (the trainer and `maxnorm_jax.evaluate`
both run this).

Metrics of each set (prefix `eval/<name>`): `mean@<n>`, `pass@<k>` (k <= n of `eval.pass_k`),
`maj@<k>` (math and arithmetic tasks), `greedy_acc`, each with `_n` and `_std`; the default set
also keeps the single-set names `eval/reward_mean`, `eval/avg@k`, `eval/pass@k`, `eval/pass@1`,
`eval/greedy_reward_mean`. `eval/train_overlap` (`eval/<name>/train_overlap` for other sets) counts
its prompts that also occur in training.
"""

from __future__ import annotations

from typing import Any, Callable, Sequence

import jax
import numpy as np

from maxnorm_jax.evaluation._sets import DEFAULT_SET, EvalSet
from maxnorm_jax.evaluation._summary import is_correct, set_metrics
from maxnorm_jax.sampling import Categorical, Greedy
from maxnorm_jax.sampling.sampler import check_finite

#: Tasks whose verifier names a final answer, so a majority vote over answers means something.
ANSWER_TASKS = ("math", "arith", "arith_digits", "arith_noisy", "arith_mix")


def canonical_answer(task: str, info: dict[str, Any]) -> str | None:
  """The verifier's canonical form of a completion's answer (None: no answer): the integer of the
  arithmetic tasks, math-verify's parsed form (`canonical`) of math, else its extracted text."""
  if info.get("parse_failed") == "pred" or info.get("timeout") or info.get("crash"):
    return None
  pred = info.get("canonical", info.get("pred"))
  if pred is None or str(pred).strip() == "":
    return None
  if task.startswith("arith"):
    try:
      return str(int(str(pred)))
    except ValueError:
      return None
  return str(pred)


def _host(x: jax.Array) -> np.ndarray:
  """Every row of a (possibly multi-process) global array, on every process (evaluation only)."""
  if jax.process_count() == 1:
    return np.asarray(jax.device_get(x))
  from jax.experimental import multihost_utils

  return np.asarray(multihost_utils.process_allgather(x, tiled=True))


class Evaluator:
  """Runs the evaluation sets with the trainer's sampler and verifier pool.

  sample(params, prompt_ids [R, L], prompt_mask [R, L], key, method) -> (ids, mask, out) with
  out.tokens [R, N] and out.lengths [R] (the trainer's `_sample`). record(r) fills a record's task.
  """

  def __init__(
    self,
    sets: Sequence[EvalSet],
    *,
    sample: Callable,
    pool: Any,
    tokenizer: Any,
    record: Callable[[dict], dict],
    n: int,
    temperature: float,
    pass_k: Sequence[int],
    num_resamples: int,
    seed: int,
  ):
    self.sets = list(sets)
    self.sample, self.pool, self.tokenizer, self.record = sample, pool, tokenizer, record
    self.n, self.temperature = int(n), float(temperature)
    self.pass_k, self.num_resamples, self.seed = tuple(pass_k), int(num_resamples), int(seed)

  def _complete(self, params, batch: dict, key, method, repeat: int, records: list[dict]):
    """Texts and scores of `repeat` completions per prompt (prompt-major) -> (texts, handle)."""
    ids = np.repeat(batch["prompt_ids"], repeat, axis=0)
    mask = np.repeat(batch["prompt_mask"], repeat, axis=0)
    _, _, out = self.sample(params, ids, mask, key, method)
    check_finite(out)  # garbage token ids from a diverged policy must not reach the tokenizer
    tokens, lengths = _host(out.tokens), _host(out.lengths)
    texts = [self.tokenizer.decode(tokens[i, : lengths[i]].tolist(), skip_special_tokens=True) for i in range(len(ids))]
    items = [(t, records[i // repeat]) for i, t in enumerate(texts)]
    return texts, self.pool.submit(items)

  def run_set(self, params, s: EvalSet, step: int, index: int) -> tuple[dict[str, float], list[dict]]:
    """(metrics, one detail row per prompt) of one set at `step`."""
    key = jax.random.fold_in(jax.random.key(self.seed + 1), step)
    if index:
      key = jax.random.fold_in(key, index)
    records = [self.record(r) for r in s.records]
    p, n = len(records), self.n
    g_texts, g_handle = self._complete(params, s.batch, key, Greedy(), 1, records)
    texts, handle = self._complete(params, s.batch, key, Categorical(temperature=self.temperature), n, records)
    for h in (g_handle, handle):
      self.pool.wait(h)  # RuntimeError if the pool broke, instead of waiting forever
    g_scores, scores = g_handle.result(), handle.result()
    g_rewards = np.array([x.reward for x in g_scores], np.float64)
    g_correct = is_correct(g_rewards, [x.resolution for x in g_scores]) & np.array([x.valid for x in g_scores])
    rewards = np.array([x.reward for x in scores], np.float64).reshape(p, n)
    resolution = np.array([x.resolution for x in scores], np.float64).reshape(p, n)
    valid = np.array([x.valid for x in scores], bool).reshape(p, n)
    correct = is_correct(rewards, resolution) & valid
    answers = [[canonical_answer(records[q]["task"], scores[q * n + i].info) for i in range(n)] for q in range(p)]
    with_maj = all(r["task"] in ANSWER_TASKS for r in records)
    metrics = set_metrics(
      s.prefix,
      rewards,
      correct,
      g_correct,
      pass_k=self.pass_k,
      answers=answers if with_maj else None,
      num_resamples=self.num_resamples,
      seed=0,
    )
    metrics[s.overlap_key] = float(s.train_overlap)
    if s.name == DEFAULT_SET:
      metrics.update(
        {
          "eval/reward_mean": float(rewards.mean()),
          "eval/avg@k": float(rewards.mean()),
          "eval/pass@k": float(correct.any(axis=1).mean()),
          "eval/pass@1": float(g_correct.mean()),
          "eval/greedy_reward_mean": float(g_rewards.mean()),
        }
      )
    details = []
    for q, r in enumerate(records):
      row = {
        "set": s.name,
        "prompt": r["prompt"],
        "prompt_text": r.get("prompt_text"),
        "samples": texts[q * n : (q + 1) * n],
        "rewards": rewards[q].tolist(),
        "correct": correct[q].tolist(),
        "answers": answers[q],
        "greedy": g_texts[q],
        "greedy_reward": float(g_rewards[q]),
        "greedy_answer": canonical_answer(r["task"], g_scores[q].info),
      }
      if r.get("id") is not None:
        row["id"] = r["id"]
      details.append(row)
    return metrics, details

  def run(self, params, step: int) -> tuple[dict[str, float], list[dict]]:
    """(metrics of every set, detail rows of every set) at `step`."""
    metrics: dict[str, float] = {}
    details: list[dict] = []
    for i, s in enumerate(self.sets):
      m, d = self.run_set(params, s, step, i)
      metrics.update(m)
      details += d
    return metrics, details
