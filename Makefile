# Two entry points (see README): `make demo` runs the main job, `make test` runs the tests.
# Each creates its own virtualenv under .venv and installs what it needs.

PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
PIP := $(BIN)/python -m pip

.PHONY: demo test lint typecheck unit bench-policy bench-engine profile-switch-cost clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(PIP) install --quiet --upgrade pip

# NOTE: the `cpu` extra pulls CUDA builds of torchvision/torchaudio/torchcodec
# that break `transformers` on import; nothing here needs them, so they go.
$(VENV)/.installed-dev: pyproject.toml | $(BIN)/python
	$(PIP) install --quiet -e '.[cpu,dev]'
	$(PIP) uninstall --quiet -y torchvision torchaudio torchcodec
	touch $@

demo: $(VENV)/.installed-dev
	$(BIN)/nightjar-ray demo

lint: $(VENV)/.installed-dev
	$(BIN)/ruff format --check nightjar_ray tests loadtest
	$(BIN)/ruff check nightjar_ray tests loadtest

typecheck: $(VENV)/.installed-dev
	$(BIN)/mypy

unit: $(VENV)/.installed-dev
	$(BIN)/pytest -q

test: lint typecheck unit

bench-policy: $(VENV)/.installed-dev
	$(BIN)/nightjar-ray bench-policy

bench-engine: $(VENV)/.installed-dev
	$(BIN)/python loadtest/bench_engine.py --out docs/bench-engine.json

profile-switch-cost: $(VENV)/.installed-dev
	$(BIN)/nightjar-ray profile-switch-cost --out switch-cost.csv

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache
