# The README's commands. Everything is installed into $(VENV); a torch that is already importable there is kept,
# otherwise the CPU build torch==2.13.0 is installed (an unpinned torch would pull a multi-GB CUDA build).
SHELL := /bin/bash
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
BIN := $(VENV)/bin
PRESET ?= finding
# Runs at once: on two CPU cores, two runs of one thread each (a d2 run gains little from a second thread). A GPU
# preset on one GPU needs JOBS=1.
JOBS ?= 2
STAMP := $(VENV)/.xsa_nb-installed

.PHONY: install test test-slow reproduce docs sync clean

install: $(STAMP)

$(STAMP): settings.ini setup.py pyproject.toml
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	@$(PY) -c "import torch" 2>/dev/null && echo "keeping the installed torch $$($(PY) -c 'import torch; print(torch.__version__)')" \
		|| $(PY) -m pip install --quiet torch==2.13.0
	$(PY) -m pip install --quiet -e ".[dev]"
	$(PY) -m pip check
	@touch $@

# nbs/ is the source: exporting must not change xsa_nb/, cleaning must not change nbs/, README must match 00_index.
sync: install
	@tmp=$$(mktemp -d); cp -r xsa_nb nbs $$tmp/; \
	$(BIN)/nbdev_export && $(BIN)/nbdev_clean; \
	status=0; \
	diff -r -x __pycache__ $$tmp/xsa_nb xsa_nb || { echo "xsa_nb/ was out of sync with nbs/: run nbdev_export and commit" >&2; status=1; }; \
	diff -r -x .ipynb_checkpoints $$tmp/nbs nbs >/dev/null || { echo "notebooks were not clean: run nbdev_clean and commit" >&2; status=1; }; \
	rm -rf $$tmp; \
	$(BIN)/xsa_nb docs readme --check || status=1; \
	exit $$status

# The default tier (pyproject.toml deselects `slow`): every notebook under nbdev's rules and the fast end-to-end tests,
# over two workers; then the docs site, built from the notebooks just executed and checked in a browser (without a
# Chromium those checks skip, and the last line says so and how to get one).
# Two workers on two cores: each runs torch on one thread unless OMP_NUM_THREADS says otherwise (more threads than
# cores only spin); the tests pass at any thread count.
test test-slow: export OMP_NUM_THREADS ?= 1
test: sync
	$(BIN)/pytest -n 2 --dist loadgroup -m "not slow and not site" --durations=15
	$(BIN)/pytest -m "site and not slow"
	@$(PY) tests/browser.py

# The slow tier: notebook cells flagged `#| slow` (trained-model claims, full gradchecks, the compiled loss) and the
# tests marked `slow` (the smoke reproduction, kill-and-resume, torchrun, the slower CLI and papermill checks).
# CI runs both tiers.
test-slow: sync
	$(BIN)/pytest -m slow -n 2 --dist loadgroup

reproduce: install
	$(BIN)/xsa_nb reproduce --preset $(PRESET) --jobs $(JOBS)

docs: install
	$(BIN)/xsa_nb docs build

clean:
	rm -rf _proc _exec _exec_stage docs/_src docs/_build runs .pytest_cache _artifacts
