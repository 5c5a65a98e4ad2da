# `make train` runs the main job on its built-in default; `make test` runs the whole test suite.
# Each creates (once) its own virtual environment in .venv from pyproject.toml.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
WORKDIR ?= runs/default

.PHONY: train test lint format clean

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[test]'
	touch $@

train: $(VENV)/.installed
	$(PY) -m maxnorm_jax.main --workdir=$(WORKDIR)

test: $(VENV)/.installed
	$(PY) -m pytest -q -n 2 tests

lint: $(VENV)/.installed
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/ruff check .

format: $(VENV)/.installed
	$(VENV)/bin/ruff format .
	$(VENV)/bin/ruff check --fix .

clean:
	rm -rf $(VENV) runs
