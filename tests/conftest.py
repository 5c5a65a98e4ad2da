"""Test set-up: eight simulated CPU devices, float32, before jax is imported anywhere."""

import os

os.environ.setdefault("XLA_FLAGS", "")
if "--xla_force_host_platform_device_count" not in os.environ["XLA_FLAGS"]:
  os.environ["XLA_FLAGS"] += " --xla_force_host_platform_device_count=8"
os.environ.setdefault("JAX_PLATFORMS", "cpu")

from hypothesis import settings  # noqa: E402  (after the environment is set)

# Property tests draw the same examples on every run, so CI is reproducible.
settings.register_profile("repro", derandomize=True, print_blob=True)
settings.load_profile("repro")
