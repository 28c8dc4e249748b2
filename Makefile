# Gatehouse — `make run` starts the embedded console; `make test` runs every test.
VENV ?= .venv
PY := $(VENV)/bin/python
PYTHON ?= python3

.PHONY: install run test test-fast lint typecheck bench lgdev mutants services chromium clean

install: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml constraints.txt
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -c constraints.txt -e '.[dev]'
	touch $@

## Embedded mode: SQLite, SQLite broker file, demo users and threads, http://127.0.0.1:8000 (PORT; docs/embedded.md)
run: install
	$(PY) -m console.embedded

## The whole suite: unit, integration (PostgreSQL, Redis, Celery worker), embedded, browser.
## TEST_PROCESSES pytest sessions share the tests file by file (pytest-xdist), each with its own
## database, queue, worker and var dir; the `serial` tests (a PostgreSQL restart) run alone after them.
TEST_PROCESSES ?= 2
test: install services chromium
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/mypy console approvals lgplatform runtime
	$(PY) manage.py makemigrations --check --dry-run
	$(PY) -m pytest -n $(TEST_PROCESSES) --dist loadfile -m "not serial" --durations=40 --junitxml=var/test-times.xml
	$(PY) -m pytest -m serial

## Unit and domain tests only (no worker or other process started, no browser, no fault injection).
test-fast: install services
	$(PY) -m pytest -n $(TEST_PROCESSES) --dist loadfile -m "not integration and not embedded and not faults and not slow"

services:
	scripts/services-up

## Debian's Chromium for the browser tests (Playwright never downloads a browser): installed by
## `make test` when missing, as root or with passwordless sudo.
SUDO := $(if $(filter 0,$(shell id -u)),,sudo -n)
chromium:
	@command -v chromium >/dev/null || { $(SUDO) apt-get update -qq \
	  && DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq chromium; } \
	  || { echo "make chromium: Debian's chromium is missing and could not be installed (run it as root)"; exit 1; }

lint: install
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .

## mypy --strict on console, approvals, lgplatform and runtime (strict = true in pyproject.toml; make test runs it too).
typecheck: install
	$(VENV)/bin/mypy console approvals lgplatform runtime

## Benchmarks (not part of make test): each scenario against its same-run baseline, JSON + var/bench/summary.png
bench: install services
	$(PY) -m pip install -q -c constraints.txt -e '.[bench]'
	@$(MAKE) --no-print-directory lgdev || echo "make lgdev failed: the langgraph-sdk scenario measures Gatehouse alone"
	LANGGRAPH_DEV_PYTHON="$${LANGGRAPH_DEV_PYTHON:-$(abspath $(LGDEV))/bin/python}" $(PY) bench/run_all.py

## `langgraph dev` (langgraph-cli[inmem]) for the langgraph-sdk scenario, in a virtualenv of its own: its
## langgraph-api conflicts with constraints.txt. A .pth file appends the project's site-packages after its own,
## so the demo graph it serves (bench/lgdev/) imports. LANGGRAPH_DEV_PYTHON=... make bench uses another.
LGDEV ?= .venv-lgdev
lgdev: $(LGDEV)/.installed

$(LGDEV)/.installed: bench/lgdev/requirements.txt $(VENV)/.installed
	$(PYTHON) -m venv $(LGDEV)
	$(LGDEV)/bin/python -m pip install -q -r bench/lgdev/requirements.txt
	$(PY) -c "import site; print(site.getsitepackages()[0])" \
	  > "$$($(LGDEV)/bin/python -c 'import site; print(site.getsitepackages()[0])')/zz_gatehouse.pth"
	touch $@

## Mutation testing of the guarantee-holding modules (not part of make test): MUTANTS_BUDGET minutes (30),
## MUTANTS_MODULES=runtime/runs.py,... to pick modules, MUTANTS_ONLY=fn,fn to pick functions, MUTANTS_DEEP=1 to add
## the worker/fault/embedded tests (otherwise only the in-process ones run). Report: var/mutants/
mutants: install services
	$(PY) -m pip install -q -c constraints.txt -e '.[mutants]'
	$(PY) scripts/mutants.py

clean:
	rm -rf var .pytest_cache
