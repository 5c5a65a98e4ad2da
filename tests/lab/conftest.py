"""One run of the whole lab per test session, shared by the lab tests (compiled once)."""

import pytest

from maxnorm_jax.lab import run


@pytest.fixture(scope="session")
def lab_result(tmp_path_factory):
  workdir = tmp_path_factory.mktemp("lab")
  return run.run(str(workdir), print_fn=lambda _: None)
