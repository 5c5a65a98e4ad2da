"""maxnorm_jax.sampling: the KV-cache sampler and its sampling methods."""

from maxnorm_jax.sampling.methods import Categorical, Greedy, SamplingMethod, first_argmax, make_method
from maxnorm_jax.sampling.sampler import SampleOutput, generate, generate_from_weights

__all__ = [
  "Categorical",
  "Greedy",
  "SampleOutput",
  "SamplingMethod",
  "first_argmax",
  "generate",
  "generate_from_weights",
  "make_method",
]
