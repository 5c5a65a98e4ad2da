"""Pieces of the trainer: schedule, DAPO shaping and filters, the log-prob pass against the sampler,
exact gradient accumulation, the metric file on resume."""

import json

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from maxnorm_jax.models import ModelConfig, create_model
from maxnorm_jax.parallel import DEFAULT_RULES, make_mesh, rows_array
from maxnorm_jax.sampling import Categorical, generate_from_weights
from maxnorm_jax.train import rollout as ro
from maxnorm_jax.train import step as step_lib
from maxnorm_jax.train.metrics import MetricWriter
from maxnorm_jax.train.optimizer import learning_rate_schedule, make_optimizer
from maxnorm_jax.train.state import create_train_state, state_shardings

RULES = DEFAULT_RULES


def test_schedule_warmup_then_cosine_to_end_fraction():
  s = learning_rate_schedule(1e-3, 10, 110, "cosine", 0.1)
  np.testing.assert_allclose([s(0), s(5), s(10), s(60), s(110)], [0.0, 5e-4, 1e-3, 5.5e-4, 1e-4], rtol=1e-5)
  c = learning_rate_schedule(2e-4, 0, 50, "constant")
  assert float(c(0)) == pytest.approx(2e-4) and float(c(49)) == pytest.approx(2e-4)
  with pytest.raises(ValueError, match="optim.schedule"):
    learning_rate_schedule(1e-3, 1, 10, "linear")


def test_overlong_penalty_is_dapos_soft_punishment():
  pen = ro.overlong_penalty(np.array([4, 6, 7, 8]), max_new_tokens=8, buffer_len=2, factor=1.0)
  np.testing.assert_allclose(pen, [0.0, 0.0, -0.5, -1.0])


def test_select_groups_and_fill_from_rounds():
  r = np.array([[1, 1, 1], [0, 1, 0], [0.5, 0.5, 0.5]], np.float32)
  m = np.ones_like(r, bool)
  kept0 = ro.select_groups(r, m, 1e-6)
  np.testing.assert_array_equal(kept0, [False, True, False])
  kept1 = np.array([True, False, True])
  which, grp, n_kept = ro.fill_from_rounds([kept0, kept1], 3)
  assert n_kept == 3
  np.testing.assert_array_equal(which, [0, 1, 1])
  np.testing.assert_array_equal(grp, [1, 0, 2])
  which, grp, n_kept = ro.fill_from_rounds([kept0], 3)  # too few kept: topped up with round 0's others
  assert n_kept == 1 and list(zip(which, grp)) == [(0, 1), (0, 0), (0, 2)]


CFG = ModelConfig.tiny(63, hidden_size=32, intermediate_size=64, num_layers=1, num_heads=2, num_kv_heads=1, head_dim=16)


@pytest.fixture(scope="module")
def mesh():
  return make_mesh({"data": 4, "fsdp": 2})


@pytest.fixture(scope="module")
def sampled(mesh):
  params = create_model(CFG, mesh, RULES, seed=3).weights()
  rng = np.random.default_rng(0)
  b, length, n = 16, 6, 5
  prompt_ids = rng.integers(4, 60, size=(b, length)).astype(np.int32)
  prompt_mask = np.ones((b, length), bool)
  prompt_mask[:4, :2] = False  # some left padding
  prompt_ids[~prompt_mask] = 0
  ids = rows_array(prompt_ids, mesh, RULES)
  pm = rows_array(prompt_mask, mesh, RULES)
  out = generate_from_weights(
    CFG, params, ids, pm, jax.random.key(1), n, method=Categorical(1.0), eos_id=2, pad_id=0, mesh=mesh, rules=RULES
  )
  return params, ids, pm, out


def test_completion_logprobs_equal_the_samplers(sampled):
  params, ids, pm, out = sampled
  logp, entropy = step_lib.sequence_logprobs(CFG, 1.0, params, ids, pm, out.tokens, out.mask)
  np.testing.assert_allclose(np.asarray(logp), np.asarray(out.logprobs), atol=1e-4)
  assert logp.shape == out.tokens.shape and np.all(np.asarray(entropy)[np.asarray(out.mask)] > 0)
  assert "data" in str(logp.sharding.spec)


def test_log_prob_pass_compiles_without_ynnpack_fusions(sampled):
  params, ids, pm, out = sampled
  args = (CFG, 1.0, params, ids, pm, out.tokens, out.mask)
  plain = jax.jit(step_lib.sequence_logprobs.__wrapped__, static_argnums=(0, 1))
  assert "ynn_fusion" in plain.lower(*args).compile().as_text()  # XLA:CPU's default
  assert "ynn_fusion" not in step_lib.sequence_logprobs.lower(*args).compile().as_text()


def test_bfloat16_passes_keep_ynnpack_fusions(sampled):
  params, ids, pm, out = sampled
  bf16 = CFG.replace(dtype="bfloat16")
  assert step_lib.dense_pass_compiler_options(CFG) == {"xla_cpu_experimental_ynn_fusion_type": ""}
  assert step_lib.dense_pass_compiler_options(bf16) == {}
  assert step_lib.logprobs_fn(CFG) is step_lib.sequence_logprobs
  fn = step_lib.logprobs_fn(bf16)
  assert "ynn_fusion" in fn.lower(bf16, 1.0, params, ids, pm, out.tokens, out.mask).compile().as_text()
  logp, _ = fn(bf16, 1.0, params, ids, pm, out.tokens, out.mask)
  full, _ = step_lib.sequence_logprobs(CFG, 1.0, params, ids, pm, out.tokens, out.mask)
  m = np.asarray(out.mask)
  assert logp.dtype == jnp.float32 and logp.shape == full.shape
  np.testing.assert_allclose(np.asarray(logp)[m], np.asarray(full)[m], atol=0.01)  # bfloat16 rounding (0.0012 measured)


def test_local_rows_and_gather_cover_every_row(sampled):
  _, _, _, out = sampled
  values, idx = ro.local_rows(out.tokens)
  np.testing.assert_array_equal(idx, np.arange(16))
  np.testing.assert_array_equal(ro.gather_rows(values, idx, 16), np.asarray(out.tokens))


def _padded(mesh, sampled, extra_prompt: int, extra_completion: int):
  """The sampled batch with `extra_prompt` more left-padding columns and `extra_completion` more
  masked completion columns (what rollout.length_buckets trims away)."""
  params, ids, pm, out = sampled
  ids, pm, tokens, mask = (np.asarray(x) for x in (ids, pm, out.tokens, out.mask))
  ids = np.pad(ids, ((0, 0), (extra_prompt, 0)))
  pm = np.pad(pm, ((0, 0), (extra_prompt, 0)))
  tokens = np.pad(tokens, ((0, 0), (0, extra_completion)))
  mask = np.pad(mask, ((0, 0), (0, extra_completion)))
  return params, *(rows_array(x, mesh, RULES) for x in (ids, pm, tokens, mask))


def _update_once(mesh, sampled, minibatches, grad_accum, aggregation, advantage_scale=1.0, extra=(0, 0)):
  params, ids, pm, tokens, mask = _padded(mesh, sampled, *extra)
  opt = optax.sgd(0.1)
  state = create_train_state(jax.tree.map(jnp.copy, params), opt, 0, {}, mesh)
  b = ids.shape[0]
  rng = np.random.default_rng(1)
  old, _ = step_lib.sequence_logprobs(CFG, 1.0, params, ids, pm, tokens, mask)
  batch = step_lib.Rollout(
    prompt_ids=ids,
    prompt_mask=pm,
    tokens=tokens,
    mask=mask,
    loss_mask=mask,
    old_logp=old,
    ref_logp=old - 0.1,
    advantages=rows_array((rng.normal(size=b) * advantage_scale).astype(np.float32), mesh, RULES),
    kl_weight=rows_array(np.ones(b, np.float32), mesh, RULES),
    takes_part=rows_array(np.arange(b) % 5 != 0, mesh, RULES),
  )
  spec = step_lib.UpdateSpec(
    model=CFG,
    mesh=mesh,
    rules=RULES,
    optimizer=opt,
    temperature=1.0,
    surrogate="ppo",
    aggregation=aggregation,
    kl_kind="k3",
    kl_in_loss=True,
    dual_clip=None,
    ppo_epochs=1,
    minibatches=minibatches,
    grad_accum=grad_accum,
    max_len=5,  # the sampled completions' max_new_tokens, whatever the batch's width
  )
  hp = {
    k: jnp.float32(v) for k, v in dict(clip_low=0.2, clip_high=0.28, beta=0.05, entropy_coef=0.01, aux_coef=0.0).items()
  }
  new, metrics = step_lib.update_fn(spec, state_shardings(state))(state, batch, hp)
  return new, metrics


@pytest.mark.parametrize("aggregation", ["token-mean", "seq-mean-token-sum-norm"])
def test_gradient_accumulation_is_exact(mesh, sampled, aggregation):
  whole, m1 = _update_once(mesh, sampled, 1, 1, aggregation)
  accumulated, m4 = _update_once(mesh, sampled, 1, 4, aggregation)
  for a, b in zip(jax.tree.leaves(whole.params), jax.tree.leaves(accumulated.params)):
    np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=2e-5, atol=2e-7)
  np.testing.assert_allclose(m1["loss"], m4["loss"], rtol=1e-5)
  np.testing.assert_allclose(m1["grad_norm"], m4["grad_norm"], rtol=1e-5)
  assert int(whole.step) == 1 and float(m1["grad_norm"]) > 0
  # the parameters keep their shardings through the donated update
  assert whole.params["embed"].sharding == sampled[0]["embed"].sharding


def test_metric_writer_drops_lines_after_the_resumed_step(tmp_path):
  w = MetricWriter(str(tmp_path), 5, tensorboard=True, progress=False)
  for s in range(1, 5):
    w.write(s, {"reward_mean": s / 10, "kl_mean": float("nan")})
  w.close()
  w = MetricWriter(str(tmp_path), 5, tensorboard=False, progress=False, resume_step=2)
  w.write(3, {"reward_mean": 0.99})
  w.close()
  rows = [json.loads(x) for x in open(tmp_path / "metrics.jsonl")]
  assert [r["step"] for r in rows] == [1, 2, 3]
  assert rows[2]["reward_mean"] == 0.99 and rows[0]["kl_mean"] is None
  assert any(p.name.startswith("events.out.tfevents") for p in (tmp_path / "tensorboard").iterdir())


def test_make_optimizer_clips_by_global_norm():
  opt = make_optimizer(
    dict(
      lr=1.0,
      warmup_steps=0,
      schedule="constant",
      end_lr_frac=0.1,
      weight_decay=0.0,
      b1=0.0,
      b2=0.0,
      eps=0.0,
      max_grad_norm=1.0,
    ),
    10,
  )
  g = {"w": jnp.array([3.0, 4.0])}
  updates, _ = opt.update(g, opt.init(g), g)
  # clipped to norm 1, then Adam with b1=b2=0 gives sign(g) * lr
  np.testing.assert_allclose(np.asarray(updates["w"]), [-1.0, -1.0], rtol=1e-5)


def test_gradient_diagnostics_use_the_configured_clip_range(mesh, sampled):
  from maxnorm_jax.core import advantages

  params, ids, pm, out = sampled
  b, g = ids.shape[0], 4
  logp, _ = step_lib.sequence_logprobs(CFG, 1.0, params, ids, pm, out.tokens, out.mask)
  # every ratio is e^0.5 = 1.65 and every advantage positive: clip_high 0.2 clips all tokens, 1.0 none
  batch = step_lib.Rollout(
    prompt_ids=ids,
    prompt_mask=pm,
    tokens=out.tokens,
    mask=out.mask,
    loss_mask=out.mask,
    old_logp=logp - 0.5,
    ref_logp=logp - 0.1,
    advantages=rows_array(np.ones(b, np.float32), mesh, RULES),
    kl_weight=rows_array(np.ones(b, np.float32), mesh, RULES),
    takes_part=rows_array(np.ones(b, bool), mesh, RULES),
  )
  rewards = jnp.asarray(np.tile([0.5, 0.501, 0.5, 0.502], (b // g, 1)), jnp.float32)  # low-variance groups
  card = advantages.compute("maxnorm_rloo", rewards, None, tau_res=1e-4)
  spec = step_lib.UpdateSpec(
    model=CFG,
    mesh=mesh,
    rules=RULES,
    optimizer=optax.sgd(0.1),
    temperature=1.0,
    surrogate="ppo",
    aggregation="token-mean",
    kl_kind="k3",
    kl_in_loss=True,
    dual_clip=None,
    ppo_epochs=1,
    minibatches=1,
    grad_accum=1,
  )

  def diag(clip_high):
    mask = jnp.ones(rewards.shape, bool)
    args = (spec, g, params, batch, card, rewards, mask, jnp.float32(0.05))
    return step_lib.gradient_diagnostics(*args, clip_low=jnp.float32(0.2), clip_high=jnp.float32(clip_high))

  clipped, open_ = diag(0.2), diag(1.0)
  assert float(clipped["low_variance_groups"]) == b // g
  assert float(clipped["grad_norm_reward"]) == 0.0
  assert float(open_["grad_norm_reward"]) > 0.0


def test_run_banner_eval_line_sft_line_and_progress_bar(capsys):
  from maxnorm_jax.train import metrics

  banner = metrics.run_banner("/runs/x", tensorboard=True)
  assert "metrics:     /runs/x/metrics.jsonl" in banner and "checkpoints: /runs/x/checkpoints" in banner
  assert "tensorboard --logdir /runs/x/tensorboard" in banner
  assert "TensorBoard" not in metrics.run_banner("/runs/x", tensorboard=False)
  line = metrics.eval_line(75, {"eval/reward_mean": 0.5126, "eval/pass@1": 0.25, "eval/other/mean@4": 0.1})
  assert line == "eval step 75: reward_mean 0.513, pass@1 0.250"
  assert metrics.sft_line([2.0, 1.5, 0.25]) == "SFT warm start: 3 steps, loss 2.000 -> 0.250"
  assert metrics.progress_bar([1, 2], 2, "SFT", enabled=False) == [1, 2]
  assert list(metrics.progress_bar([1, 2], 2, "SFT", enabled=True)) == [1, 2]
  assert "SFT" in capsys.readouterr().err  # tqdm draws on stderr


def test_a_non_finite_update_is_skipped_and_counted(mesh, sampled):
  """Issue 12.4: a NaN loss must not reach the weights (train.on_nonfinite skips or stops)."""
  good, m_good = _update_once(mesh, sampled, 1, 1, "token-mean")
  bad, m_bad = _update_once(mesh, sampled, 1, 1, "token-mean", advantage_scale=np.nan)
  assert float(m_good["nonfinite_updates"]) == 0 and float(m_bad["nonfinite_updates"]) == 1
  assert not np.isfinite(float(m_bad["loss"]))
  params, *_ = sampled
  for before, after in zip(jax.tree.leaves(params), jax.tree.leaves(bad.params)):
    np.testing.assert_array_equal(np.asarray(before), np.asarray(after))  # skipped: weights unchanged
  assert any(
    not np.array_equal(np.asarray(a), np.asarray(b))
    for a, b in zip(jax.tree.leaves(params), jax.tree.leaves(good.params))
  )


def test_sampling_from_non_finite_logits_is_an_error(mesh, sampled):
  from maxnorm_jax.sampling.sampler import check_finite

  params, ids, pm, out = sampled
  assert not bool(out.nonfinite_logits)
  check_finite(out)
  broken = {**params, "final_norm": params["final_norm"] * jnp.inf}
  bad = generate_from_weights(
    CFG, broken, ids, pm, jax.random.key(1), 5, method=Categorical(1.0), eos_id=2, pad_id=0, mesh=mesh, rules=RULES
  )
  assert bool(bad.nonfinite_logits)
  with pytest.raises(FloatingPointError, match="logits held NaN or infinite values"):
    check_finite(bad)


def test_length_buckets_and_logp_mismatch_by_bucket():
  assert step_lib.length_buckets(64) == (16, 32, 48, 64)
  assert step_lib.length_buckets(5) == (2, 3, 4, 5)
  assert step_lib.length_buckets(2) == (1, 2)
  sampler = jnp.array([[-1.0, -2.0, -3.0, 0.0], [-0.5, 0.0, 0.0, 0.0], [-1.0, -1.0, -1.0, -1.0]])
  trainer = jnp.array([[-1.1, -2.0, -2.7, 9.0], [-0.5, 9.0, 9.0, 9.0], [-1.0, -1.0, -1.0, -1.2]])
  mask = jnp.array([[1, 1, 1, 0], [1, 0, 0, 0], [1, 1, 1, 1]], bool)
  lengths = jnp.array([3, 1, 4])
  out = step_lib.logp_mismatch(sampler, trainer, mask, lengths, buckets=(1, 2, 3, 4))
  assert float(out["logp_mismatch_mean"]) == pytest.approx(0.6 / 8)  # off-mask 9s are ignored
  assert float(out["logp_mismatch_max"]) == pytest.approx(0.3)
  assert float(out["logp_mismatch_mean/len_le_1"]) == 0.0
  assert np.isnan(out["logp_mismatch_mean/len_le_2"])  # no completion of length 2
  assert float(out["logp_mismatch_mean/len_le_3"]) == pytest.approx(0.4 / 3)
  assert float(out["logp_mismatch_mean/len_le_4"]) == pytest.approx(0.2 / 4)


def test_truncated_sampling_logprobs_equal_the_trainers_recompute(mesh, sampled):
  """top_p = 0.9, top_k = 5, temperature 0.7: the sampler's log-probs are those of the truncated,
  renormalised distribution, and so are the trainer's (maxnorm_jax.core.truncation); the full
  softmax the trainer used before differs."""
  params, ids, pm, _ = sampled
  method = Categorical(0.7, top_p=0.9, top_k=5)
  out = generate_from_weights(
    CFG, params, ids, pm, jax.random.key(2), 5, method=method, eos_id=2, pad_id=0, mesh=mesh, rules=RULES
  )
  mask = np.asarray(out.mask)
  sampler = np.asarray(out.logprobs)
  trainer, entropy = step_lib.sequence_logprobs(CFG, 0.7, params, ids, pm, out.tokens, out.mask, top_k=5, top_p=0.9)
  np.testing.assert_allclose(np.asarray(trainer)[mask], sampler[mask], atol=1e-5)
  assert float(np.max(np.asarray(entropy)[mask])) <= np.log(5) + 1e-5  # at most 5 tokens kept
  full, _ = step_lib.sequence_logprobs(CFG, 0.7, params, ids, pm, out.tokens, out.mask)
  gap = sampler[mask] - np.asarray(full)[mask]  # -log(kept mass) >= 0
  assert np.all(gap >= -1e-6) and float(np.max(gap)) > 0.1


def test_pad_widths_and_trimming_left_padding():
  assert ro.pad_widths(64) == (8, 16, 32, 64) and ro.pad_widths(4096) == (512, 1024, 2048, 4096)
  assert ro.pad_widths(8) == (8,) and ro.pad_widths(100) == (13, 25, 50, 100)
  assert [ro.pad_width(n, 64) for n in (1, 8, 9, 17, 33, 64, 80)] == [8, 8, 16, 32, 64, 64, 64]
  ids = np.zeros((2, 32), np.int32)
  mask = np.zeros((2, 32), bool)
  mask[0, -5:], mask[1, -11:] = True, True
  ids[mask] = 7
  short_ids, short_mask = ro.trim_left_padding(ids, mask)
  assert short_ids.shape == (2, 16) and short_mask.sum() == 16 and short_ids.sum() == 7 * 16


@pytest.mark.parametrize("aggregation", ["token-mean", "seq-mean-token-sum-norm"])
def test_padding_columns_change_nothing(mesh, sampled, aggregation):
  """rollout.length_buckets drops left-padding prompt columns and masked completion columns: with
  10 + 3 such columns the log-probs, the update and its metrics are those of the trimmed batch."""
  params, ids, pm, tokens, mask = _padded(mesh, sampled, 10, 3)
  wide, _ = step_lib.sequence_logprobs(CFG, 1.0, params, ids, pm, tokens, mask)
  _, ids, pm, tokens, mask = _padded(mesh, sampled, 0, 0)
  narrow, _ = step_lib.sequence_logprobs(CFG, 1.0, params, ids, pm, tokens, mask)
  np.testing.assert_allclose(np.asarray(wide)[:, :5], np.asarray(narrow), atol=1e-6)
  assert np.all(np.asarray(wide)[:, 5:] == 0.0)
  trimmed, m_trimmed = _update_once(mesh, sampled, 2, 1, aggregation)
  padded, m_padded = _update_once(mesh, sampled, 2, 1, aggregation, extra=(10, 3))
  for a, b in zip(jax.tree.leaves(trimmed.params), jax.tree.leaves(padded.params)):
    np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-5, atol=1e-7)
  for k in ("loss", "grad_norm", "kl_loss", "clip_frac"):
    np.testing.assert_allclose(m_trimmed[k], m_padded[k], rtol=1e-5, atol=1e-7)
