"""maxnorm_jax.sampling: the KV-cache sampler and its sampling methods."""

from maxnorm_jax.sampling.methods import Categorical, Greedy, SamplingMethod, first_argmax, make_method
from maxnorm_jax.sampling.sampler import (
  DecodeState,
  SampleOutput,
  check_finite,
  decode,
  generate,
  generate_from_weights,
  prefill,
)

__all__ = [
  "Categorical",
  "DecodeState",
  "Greedy",
  "SampleOutput",
  "SamplingMethod",
  "check_finite",
  "decode",
  "first_argmax",
  "generate",
  "generate_from_weights",
  "make_method",
  "prefill",
]
