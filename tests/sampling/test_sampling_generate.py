"""generate: teacher-forced log-probs, left padding, eos handling, sharded sampling."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import PartitionSpec as P

from maxnorm_jax.models import ModelConfig, create_model, next_token_targets, token_logprobs
from maxnorm_jax.parallel import make_mesh
from maxnorm_jax.sampling import Categorical, generate

VOCAB, B, PROMPT, N = 96, 4, 8, 8


@pytest.fixture(scope="module")
def cfg():
  return ModelConfig.tiny(vocab_size=VOCAB)


@pytest.fixture(scope="module")
def model(cfg):
  return create_model(cfg, seed=7)


@pytest.fixture(scope="module")
def prompts():
  """Left-padded prompts [4, 8] of real lengths 8, 5, 3, 6."""
  rng = np.random.RandomState(3)
  lengths = np.array([8, 5, 3, 6])
  mask = np.arange(PROMPT)[None] >= (PROMPT - lengths)[:, None]
  ids = np.where(mask, rng.randint(1, VOCAB, (B, PROMPT)), 0)
  return ids, mask


@pytest.fixture(scope="module")
def greedy(model, prompts):
  return generate(model, *prompts, jax.random.key(0), N, temperature=0.0)


def _teacher_forced_logits(model, prompts, out):
  ids, mask = prompts
  full = jnp.concatenate([jnp.asarray(ids), out.tokens], axis=1)
  full_mask = jnp.concatenate([jnp.asarray(mask), out.mask], axis=1)
  logits = jax.jit(lambda m, x, a: m(x, a))(model, full, full_mask)
  return logits[:, PROMPT - 1 : -1], full, full_mask  # the logits that scored each new token


def test_output_shapes_and_types(greedy):
  assert greedy.tokens.shape == greedy.logprobs.shape == greedy.mask.shape == (B, N)
  assert greedy.tokens.dtype == jnp.int32 and greedy.logprobs.dtype == jnp.float32
  np.testing.assert_array_equal(greedy.lengths, [N] * B)
  assert bool(jnp.all(greedy.truncated)) and bool(jnp.all(greedy.mask))


def test_greedy_tokens_are_the_teacher_forced_argmax(model, prompts, greedy):
  logits, _, _ = _teacher_forced_logits(model, prompts, greedy)
  np.testing.assert_array_equal(greedy.tokens, jnp.argmax(logits, axis=-1))
  ref = jnp.take_along_axis(jax.nn.log_softmax(logits), greedy.tokens[..., None], axis=-1)[..., 0]
  np.testing.assert_allclose(greedy.logprobs, ref, atol=1e-4)


def test_sampled_logprobs_equal_a_teacher_forced_pass(model, prompts):
  out = generate(model, *prompts, jax.random.key(1), N, temperature=1.0)
  _, full, full_mask = _teacher_forced_logits(model, prompts, out)
  targets, tmask = next_token_targets(full, full_mask)
  tf = token_logprobs(model, full, targets, tmask, attention_mask=full_mask, chunk_size=5)
  err = np.max(np.abs(np.asarray(tf.logp[:, PROMPT - 1 : -1] - out.logprobs)))
  assert err < 1e-4, err
  again = generate(model, *prompts, jax.random.key(1), N, temperature=1.0)
  np.testing.assert_array_equal(again.tokens, out.tokens)
  other = generate(model, *prompts, jax.random.key(2), N, temperature=1.0)
  assert not np.array_equal(np.asarray(other.tokens), np.asarray(out.tokens))


def test_filtered_sampling_logprobs_are_those_of_the_filtered_distribution(model, prompts):
  method = Categorical(temperature=0.7, top_p=0.9, top_k=5)
  out = generate(model, *prompts, jax.random.key(4), N, method=method)
  logits, _, _ = _teacher_forced_logits(model, prompts, out)
  logp_all = method.log_probs(logits.reshape(B * N, VOCAB)).reshape(B, N, VOCAB)
  ref = jnp.take_along_axis(logp_all, out.tokens[..., None], axis=-1)[..., 0]
  np.testing.assert_allclose(out.logprobs, ref, atol=1e-4)
  top5 = np.argsort(-np.asarray(logits), axis=-1)[..., :5]
  assert all(int(t) in top5[b, i] for b in range(B) for i, t in enumerate(np.asarray(out.tokens)[b]))


def test_left_padding_does_not_change_tokens(model, prompts, greedy):
  ids, mask = prompts
  # Width 5: rows 1 (length 5) and 2 (length 3) are the same prompts with less left padding;
  # rows 0 and 3 are cut to their last 5 tokens, i.e. other prompts.
  short_ids, short_mask = ids[:, -5:].copy(), mask[:, -5:].copy()
  out = generate(model, short_ids, short_mask, jax.random.key(0), N, temperature=0.0)
  same = [1, 2]
  np.testing.assert_array_equal(np.asarray(out.tokens)[same], np.asarray(greedy.tokens)[same])
  np.testing.assert_allclose(np.asarray(out.logprobs)[same], np.asarray(greedy.logprobs)[same], atol=1e-5)
  assert not np.allclose(np.asarray(out.logprobs)[3], np.asarray(greedy.logprobs)[3], atol=1e-5)


def test_eos_ends_sequences(model, prompts, greedy):
  tokens = np.asarray(greedy.tokens)
  eos = int(tokens[0, 2])
  out = generate(model, *prompts, jax.random.key(0), N, temperature=0.0, eos_id=eos, pad_id=VOCAB - 1)
  for b in range(B):
    hits = np.flatnonzero(tokens[b] == eos)
    length = int(hits[0]) + 1 if hits.size else N
    assert int(out.lengths[b]) == length
    assert bool(out.truncated[b]) == (hits.size == 0)
    np.testing.assert_array_equal(np.asarray(out.tokens)[b, :length], tokens[b, :length])
    np.testing.assert_array_equal(np.asarray(out.tokens)[b, length:], VOCAB - 1)
    np.testing.assert_array_equal(np.asarray(out.mask)[b], np.arange(N) < length)
    np.testing.assert_array_equal(np.asarray(out.logprobs)[b, length:], 0.0)
  assert int(out.lengths[0]) <= 3


def test_sharded_sampling_on_eight_devices(cfg, prompts, greedy):
  mesh = make_mesh({"data": 4, "tensor": 2})
  sharded = create_model(cfg, mesh, seed=7)
  out = generate(sharded, *prompts, jax.random.key(0), N, temperature=0.0)
  np.testing.assert_array_equal(out.tokens, greedy.tokens)
  np.testing.assert_allclose(out.logprobs, greedy.logprobs, atol=1e-5)
  assert out.tokens.sharding.spec[0] == "data"
  assert sharded.layers[0].gate[...].sharding.spec == P(None, "tensor")


def test_bad_arguments(model, prompts):
  with pytest.raises(ValueError, match="max_new_tokens"):
    generate(model, *prompts, jax.random.key(0), 0)
  with pytest.raises(ValueError, match="prompt_mask"):
    generate(model, prompts[0], prompts[1][:, 1:], jax.random.key(0), 4)
  right_padded = np.ones((B, PROMPT), bool)
  right_padded[2, -1] = False
  with pytest.raises(ValueError, match=r"left-padded.*rows \[2\]"):
    generate(model, prompts[0], right_padded, jax.random.key(0), 4)


def test_decode_loop_stops_once_every_sequence_ended(model, prompts):
  # With a zero final norm every logit is 0, so greedy picks token 0 at every step: eos_id=0
  # ends all sequences with the prefill's token and the loop must not run at all.
  silent = create_model(model.config, seed=7)
  silent.final_norm[...] = jnp.zeros_like(silent.final_norm[...])
  out = generate(silent, *prompts, jax.random.key(0), N, temperature=0.0, eos_id=0)
  assert int(out.decode_steps) == 0
  np.testing.assert_array_equal(out.lengths, [1] * B)
  assert not bool(jnp.any(out.truncated))
  np.testing.assert_allclose(out.logprobs[:, 0], -np.log(VOCAB), rtol=1e-5)
  full = generate(silent, *prompts, jax.random.key(0), N, temperature=0.0)
  assert int(full.decode_steps) == N - 1


def test_sampling_in_passes_of_rows_equals_one_pass(cfg, prompts, greedy):
  """chunks=2: prompts 0, 2 then 1, 3 (each pass sharded by rows over data=2), merged back in order."""
  from maxnorm_jax.parallel import rows_array
  from maxnorm_jax.parallel.rules import DEFAULT_RULES
  from maxnorm_jax.sampling import Greedy, generate_from_weights

  mesh = make_mesh({"data": 2}, devices=jax.devices()[:2])
  weights = create_model(cfg, mesh, seed=7).weights()
  ids, mask = (rows_array(x, mesh, DEFAULT_RULES) for x in prompts)
  eos = int(np.asarray(greedy.tokens)[0, 2])  # row 0 ends early, the others run longer
  kw = dict(method=Greedy(), eos_id=eos, pad_id=VOCAB - 1, mesh=mesh, rules=DEFAULT_RULES)
  whole = generate_from_weights(cfg, weights, ids, mask, jax.random.key(0), N, **kw)
  passes = generate_from_weights(cfg, weights, ids, mask, jax.random.key(0), N, chunks=2, **kw)
  for field in ("tokens", "mask", "lengths", "truncated"):
    np.testing.assert_array_equal(getattr(passes, field), getattr(whole, field))
  np.testing.assert_allclose(passes.logprobs, whole.logprobs, atol=1e-5)
  assert int(passes.decode_steps) == int(whole.decode_steps) and int(whole.lengths[0]) <= 3
  assert passes.tokens.sharding.spec[0] == "data"
  with pytest.raises(ValueError, match="chunks=3 does not divide the 4 prompts"):
    generate_from_weights(cfg, weights, ids, mask, jax.random.key(0), N, chunks=3, **kw)
