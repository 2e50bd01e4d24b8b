# Two entry points (see README): `make demo` runs the main job, `make test` runs the tests.
# Each creates its own virtualenv under .venv and installs what it needs.

PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
PIP := $(BIN)/python -m pip

.PHONY: demo test tools lint typecheck generate unit unit-shuffled bench-research bench-policy \
	bench-sim bench-sim-seeds bench-engine profile-switch-cost gpu-figures clean

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
	$(BIN)/nightjar-ray demo $(ARGS)

lint: $(VENV)/.installed-dev
	$(BIN)/ruff format --check nightjar_ray tests benchmarks
	$(BIN)/ruff check nightjar_ray tests benchmarks

typecheck: $(VENV)/.installed-dev
	$(BIN)/mypy

# The generated operator files: dashboards, the chart's values.schema.json and README.md.
generate: $(VENV)/.installed-dev
	$(BIN)/nightjar-ray dashboards generate

# Debian's prometheus package (prometheus + promtool) for the operator tests (tests/ops).
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)
tools:
	@command -v promtool >/dev/null 2>&1 && command -v prometheus >/dev/null 2>&1 || { \
		$(SUDO) apt-get update -qq && DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install \
			-y -qq --no-install-recommends prometheus >/dev/null; }

unit: $(VENV)/.installed-dev tools
	$(BIN)/pytest -q

test: lint typecheck unit

# The unit tests with the modules and the tests inside each in a random order (every
# module must pass in any order); the header prints the seed, which
# `make unit-shuffled ARGS=--random-order-seed=N` repeats.
unit-shuffled: $(VENV)/.installed-dev tools
	$(BIN)/pytest -q --random-order-bucket=module $(ARGS)

# Research scripts live in benchmarks/ (not installed); their results go to benchmarks/results/.
RESULTS := benchmarks/results

# The long research checks that `make unit` leaves out (pytest marker `research`).
bench-research: $(VENV)/.installed-dev
	$(BIN)/pytest -q -m research

bench-policy: $(VENV)/.installed-dev
	$(BIN)/python benchmarks/bench_policy.py

# The C_switch profile of the generated s=0.05 pair on this machine, read by bench-engine.
CPU_PROFILE := $(RESULTS)/profiles/cpu-2core-bench-s0.05.csv
$(CPU_PROFILE): | $(VENV)/.installed-dev
	$(BIN)/nightjar-ray profile-switch-cost --device cpu --skip-tokens 16,64,256 \
		--batch-sizes 1,4,16,48 --repeats 3 --out $@

bench-engine: $(VENV)/.installed-dev $(CPU_PROFILE)
	$(BIN)/python benchmarks/bench_engine.py --out $(RESULTS)/bench-engine.json \
		--profile $(CPU_PROFILE)

profile-switch-cost: $(VENV)/.installed-dev
	$(BIN)/nightjar-ray profile-switch-cost --out $(RESULTS)/switch-cost.csv

# Simulator benchmarks recorded in docs/benchmarks.md ("Simulator"); they replay the Azure
# conversation trace named by NIGHTJAR_TRACE (default: the shared copy beside the checkout,
# where there is one; without a trace the trace scenarios are left out).
export NIGHTJAR_TRACE ?= $(wildcard ../shared/data/azure_llm_inference_trace_conv_2023.csv)
SIM_SETTINGS := rtx4090-7b a100-13b l20x2-32b
SIM_JOBS ?= 1
SIM := $(BIN)/nightjar-ray simulate compare --jobs $(SIM_JOBS)
# The paper's offload (weights only) and uncapped probes: the simulator's defaults before
# they changed (docs/simulator.md, "Choosing defaults").
PAPER_OFFLOAD := --no-reclaim-draft-kv --nightjar-params '{"explore_bin_steps": null}'
bench-sim: $(VENV)/.installed-dev
	for s in $(SIM_SETTINGS); do for n in 0 1 2; do \
		$(SIM) --setting $$s --no-trace --seed $$n; done; done
	for s in $(SIM_SETTINGS); do for d in sharegpt alpaca specbench; do \
		$(SIM) --setting $$s --dataset $$d --trace-only; done; done
	$(SIM) --setting rtx4090-7b --dataset sharegpt --trace-only --trace-qps 6
	for s in $(SIM_SETTINGS); do \
		$(SIM) --setting $$s --num-requests 3000 --no-trace --with-ceiling; done
	$(SIM) --setting rtx4090-7b --num-requests 3000 --no-trace $(PAPER_OFFLOAD) \
		--with-ceiling --contenders nightjar,off,fixed-1,gamma0+offload --qps 10,20,35
	for s in $(SIM_SETTINGS); do $(BIN)/python benchmarks/simulate_tune.py --setting $$s; done

# Trace replays over five seeds (docs/benchmarks.md, "Trace replays over five seeds").
SIM_STATICS := off,fixed-1,fixed-2,fixed-3,fixed-4
bench-sim-seeds: $(VENV)/.installed-dev
	for s in rtx4090-7b l20x2-32b; do for d in sharegpt specbench; do \
		$(SIM) --setting $$s --dataset $$d --trace-only --seeds 0,1,2,3,4 \
			--contenders nightjar,$(SIM_STATICS); done; done
	for d in sharegpt specbench; do \
		$(SIM) --setting a100-13b --dataset $$d --trace-only --seeds 0,1,2,3,4 \
			--contenders nightjar,$(SIM_STATICS),fixed-5; done

# Issue 41's four GPU figures (docs/benchmarks.md, "GPU figures (issue 41)"), one command on
# a GPU machine whose python has PyTorch, Triton and cuda-bindings; no vLLM, no network, so
# no virtualenv here. Without CUDA it refuses (exit 2).
gpu-figures:
	$(PYTHON) benchmarks/gpu_figures.py --out $(RESULTS)/gpu-figures.json --markdown

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache
