"""The RL sampler pieces: public prefill/decode, a shared prefill per prompt group, compaction."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from maxnorm_jax.models import ModelConfig, create_model, next_token_targets, token_logprobs
from maxnorm_jax.parallel import make_mesh
from maxnorm_jax.sampling import Categorical, decode, generate, prefill
from maxnorm_jax.sampling.sampler import cache_blocks

VOCAB, P, G, PROMPT, N = 16, 4, 8, 6, 32
EOS = 3


@pytest.fixture(scope="module")
def model():
  return create_model(ModelConfig.tiny(vocab_size=VOCAB), seed=11)


@pytest.fixture(scope="module")
def prompts():
  """Left-padded prompts [4, 6] of real lengths 6, 3, 5, 2."""
  rng = np.random.RandomState(5)
  lengths = np.array([6, 3, 5, 2])
  mask = np.arange(PROMPT)[None] >= (PROMPT - lengths)[:, None]
  return np.where(mask, rng.randint(1, VOCAB, (P, PROMPT)), 0), mask


@pytest.fixture(scope="module")
def shared(model, prompts):
  """G samples of each prompt from one prefill per prompt, eos on, no compaction."""
  return generate(model, *prompts, jax.random.key(9), N, temperature=1.0, eos_id=EOS, num_samples=G)


def test_cache_blocks_cover_the_cache_and_grow_geometrically():
  assert cache_blocks(PROMPT, N) == ((0, 22), (22, 38))
  assert cache_blocks(6, 100) == ((0, 22), (22, 38), (38, 70), (70, 106))
  assert cache_blocks(8, 4) == ((0, 12),)


def test_logprobs_across_cache_blocks_equal_a_teacher_forced_pass(model, prompts, shared):
  ids, mask = prompts
  full = jnp.concatenate([jnp.repeat(jnp.asarray(ids), G, 0), shared.tokens], axis=1)
  full_mask = jnp.concatenate([jnp.repeat(jnp.asarray(mask), G, 0), shared.mask], axis=1)
  targets, tmask = next_token_targets(full, full_mask)
  tf = token_logprobs(model, full, targets, tmask, attention_mask=full_mask)
  ref = jnp.where(shared.mask, tf.logp[:, PROMPT - 1 : -1], 0.0)
  np.testing.assert_allclose(shared.logprobs, ref, atol=1e-4)
  assert int(jnp.max(shared.lengths)) > 22 - PROMPT  # some rows wrote into the second block


def test_shared_prefill_equals_repeated_prompts(model, prompts, shared):
  ids, mask = prompts
  repeated = generate(
    model, np.repeat(ids, G, 0), np.repeat(mask, G, 0), jax.random.key(9), N, temperature=1.0, eos_id=EOS
  )
  assert shared.tokens.shape == (P * G, N)
  np.testing.assert_array_equal(shared.tokens, repeated.tokens)
  np.testing.assert_array_equal(shared.lengths, repeated.lengths)
  np.testing.assert_allclose(shared.logprobs, repeated.logprobs, atol=1e-6)
  # a group's G rows are G different samples of the same prompt
  first = np.asarray(shared.tokens)[:G, :4]
  assert len({tuple(r) for r in first}) > 1


def test_compaction_changes_no_sample_and_computes_fewer_rows(model, prompts, shared):
  lengths = np.asarray(shared.lengths)
  assert lengths.min() < N // 4 and int(shared.decode_steps) > N // 2  # a long tail: compaction has work
  out = generate(model, *prompts, jax.random.key(9), N, temperature=1.0, eos_id=EOS, num_samples=G, compact_every=4)
  np.testing.assert_array_equal(out.tokens, shared.tokens)
  np.testing.assert_array_equal(out.mask, shared.mask)
  np.testing.assert_array_equal(out.lengths, shared.lengths)
  np.testing.assert_array_equal(out.truncated, shared.truncated)
  np.testing.assert_allclose(out.logprobs, shared.logprobs, atol=1e-6)
  assert int(out.decode_steps) == int(shared.decode_steps)
  assert int(shared.row_steps) == P * G * int(shared.decode_steps)
  assert int(out.row_steps) < int(shared.row_steps)


def test_public_prefill_and_decode_are_keyword_only(model, prompts, shared):
  ids, mask = prompts
  cfg, w, method = model.config, model.weights(), Categorical(1.0)
  kw = dict(cfg=cfg, weights=w, method=method, eos_id=EOS, pad_id=EOS)
  state = prefill(
    **kw,
    prompt_ids=jnp.asarray(ids),
    prompt_mask=jnp.asarray(mask),
    key=jax.random.key(9),
    max_new_tokens=N,
    num_samples=G,
  )
  k_blocks, v_blocks = state.caches[0]
  assert [k.shape for k in k_blocks] == [(P * G, 2, 16, 22), (P * G, 2, 16, 16)]  # cache_blocks(6, 32)
  assert [v.shape for v in v_blocks] == [(P * G, 2, 22, 16), (P * G, 2, 16, 16)]
  assert state.tokens.shape == (P * G, N)
  state = decode(**kw, state=state)
  np.testing.assert_array_equal(state.tokens, shared.tokens)
  with pytest.raises(TypeError):
    decode(cfg, w, state)  # the pieces take keywords only
  with pytest.raises(ValueError, match="num_samples"):
    prefill(**kw, prompt_ids=ids, prompt_mask=mask, key=jax.random.key(0), max_new_tokens=N, num_samples=0)


def test_shared_prefill_and_compaction_on_eight_devices(prompts, shared):
  mesh = make_mesh({"data": 4, "tensor": 2})
  sharded = create_model(ModelConfig.tiny(vocab_size=VOCAB), mesh, seed=11)
  out = generate(sharded, *prompts, jax.random.key(9), N, temperature=1.0, eos_id=EOS, num_samples=G, compact_every=4)
  np.testing.assert_array_equal(out.tokens, shared.tokens)
  np.testing.assert_allclose(out.logprobs, shared.logprobs, atol=1e-5)
  assert out.tokens.sharding.spec[0] == "data"
