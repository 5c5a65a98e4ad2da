"""Shared, compiled estimator calls for the core tests: one compilation per (name, shape)."""

import functools

import jax
import pytest

from maxnorm_jax.core import advantages


@functools.cache
def jitted(name: str, **params):
  return jax.jit(lambda r, m: advantages.compute(name, r, m, **params))


@pytest.fixture(scope="session")
def compute_jit():
  def run(name, rewards, mask, **params):
    return jitted(name, **params)(rewards, mask)

  return run
