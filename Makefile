# Two entry points (see README): `make demo` runs the main job, `make test` runs the tests.
# Each creates its own virtualenv under .venv and installs what it needs.

PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
PIP := $(BIN)/python -m pip

.PHONY: demo test lint typecheck unit bench-policy bench-sim bench-engine profile-switch-cost clean

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
	$(BIN)/python loadtest/bench_engine.py --out docs/bench-engine.json \
		--profile docs/profiles/cpu-2core-bench-s0.05.csv

profile-switch-cost: $(VENV)/.installed-dev
	$(BIN)/nightjar-ray profile-switch-cost --out switch-cost.csv

# Simulator benchmarks recorded in docs/benchmarks.md ("Simulator"); needs ../shared/data.
SIM_SETTINGS := rtx4090-7b a100-13b l20x2-32b
SIM_JOBS ?= 1
SIM := $(BIN)/nightjar-ray simulate compare --jobs $(SIM_JOBS)
bench-sim: $(VENV)/.installed-dev
	for s in $(SIM_SETTINGS); do for n in 0 1 2; do \
		$(SIM) --setting $$s --no-trace --seed $$n; done; done
	for s in $(SIM_SETTINGS); do for d in sharegpt alpaca specbench; do \
		$(SIM) --setting $$s --dataset $$d --trace-only; done; done
	for s in $(SIM_SETTINGS); do \
		$(SIM) --setting $$s --num-requests 3000 --no-trace; done
	$(SIM) --setting rtx4090-7b --dataset sharegpt --trace-only \
		--trace-qps 6
	$(SIM) --setting rtx4090-7b --num-requests 3000 --no-trace \
		--with-ceiling --contenders nightjar,off,fixed-1,gamma0+offload --qps 10,20,35
	for s in $(SIM_SETTINGS); do \
		$(SIM) --setting $$s --num-requests 3000 --no-trace \
			--reclaim-draft-kv --with-ceiling; \
		for d in sharegpt alpaca specbench; do \
		$(SIM) --setting $$s --dataset $$d --trace-only \
			--reclaim-draft-kv --contenders nightjar,off,fixed-1,fixed-2; done; done
	for s in $(SIM_SETTINGS); do $(BIN)/nightjar-ray simulate tune --setting $$s; done

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache
