# `make train` runs the main job on its built-in default; `make test` runs the whole test suite.
# Both use the virtual environment .venv, created once: `make train` installs only what training
# needs (`pip install -e .`), `make test` (and lint / format) adds the test extras (`.[test]`).
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
WORKDIR ?= runs/default

.PHONY: train test lint format clean bench-env

$(VENV)/.created:
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	touch $@

$(VENV)/.installed-train: pyproject.toml setup.py $(VENV)/.created
	$(PY) -m pip install -q -e .
	touch $@

$(VENV)/.installed-test: pyproject.toml setup.py $(VENV)/.installed-train
	$(PY) -m pip install -q -e '.[test,tpu]'
	touch $@

train: $(VENV)/.installed-train
	$(PY) -m maxnorm_jax.main --workdir=$(WORKDIR)

test: $(VENV)/.installed-test
	$(PY) -m pytest -q -n 2 tests

lint: $(VENV)/.installed-test
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/ruff check .

format: $(VENV)/.installed-test
	$(VENV)/bin/ruff format .
	$(VENV)/bin/ruff check --fix .

# The peers' benchmark environment (transformers, vLLM CPU, TRL): benchmarks/peers/README.md.
bench-env:
	PYTHON=$(PYTHON) bash benchmarks/peers/setup_env.sh

clean:
	rm -rf $(VENV) runs
