# Two entry points (see README): `make demo` runs the main job, `make test` runs the tests.
# Each creates its own virtualenv under .venv and installs what it needs.

PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
PIP := $(BIN)/python -m pip

.PHONY: demo test lint typecheck unit bench-policy clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(PIP) install --quiet --upgrade pip

$(VENV)/.installed-dev: pyproject.toml | $(BIN)/python
	$(PIP) install --quiet -e '.[dev]'
	touch $@

demo: $(VENV)/.installed-dev
	$(BIN)/nightjar-ray demo

lint: $(VENV)/.installed-dev
	$(BIN)/ruff format --check nightjar_ray tests
	$(BIN)/ruff check nightjar_ray tests

typecheck: $(VENV)/.installed-dev
	$(BIN)/mypy

unit: $(VENV)/.installed-dev
	$(BIN)/pytest -q

test: lint typecheck unit

bench-policy: $(VENV)/.installed-dev
	$(BIN)/nightjar-ray bench-policy

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache
