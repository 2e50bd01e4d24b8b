# Two entry points (see README): `make demo` runs the main job, `make test` runs the tests.
# Each creates its own virtualenv under .venv and installs what it needs.

PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
PIP := $(BIN)/python -m pip

.PHONY: demo test lint typecheck unit bench-policy bench-sim clean

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

# Simulator benchmarks recorded in docs/benchmarks.md ("Simulator"); needs ../shared/data.
SIM_SETTINGS := rtx4090-7b a100-13b l20x2-32b
bench-sim: $(VENV)/.installed-dev
	for s in $(SIM_SETTINGS); do for n in 0 1 2; do \
		$(BIN)/nightjar-ray simulate compare --setting $$s --no-trace --seed $$n; done; done
	for s in $(SIM_SETTINGS); do for d in sharegpt alpaca specbench; do \
		$(BIN)/nightjar-ray simulate compare --setting $$s --dataset $$d --trace-only; done; done
	for s in $(SIM_SETTINGS); do \
		$(BIN)/nightjar-ray simulate compare --setting $$s --num-requests 3000 --no-trace; done
	$(BIN)/nightjar-ray simulate compare --setting rtx4090-7b --dataset sharegpt --trace-only \
		--trace-qps 6
	$(BIN)/nightjar-ray simulate compare --setting rtx4090-7b --num-requests 3000 --no-trace \
		--with-ceiling --contenders nightjar,off,fixed-1,gamma0+offload --qps 10,20,35
	for s in $(SIM_SETTINGS); do $(BIN)/nightjar-ray simulate tune --setting $$s; done

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache
