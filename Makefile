# Every target installs what it needs into .venv first.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-stamp
export DISPATCHER_HOME ?= $(CURDIR)/.dispatcher

.PHONY: install run demo test test-fast lint format bench soak clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --disable-pip-version-check --upgrade pip
	$(PY) -m pip install -q --disable-pip-version-check -e '.[dev]'
	touch $(STAMP)

install: $(STAMP)

# Migrate, then run the worker (embedded PostgreSQL unless DATABASE_URL is set).
run: install
	$(BIN)/dispatcher migrate
	exec $(BIN)/dispatcher run $(RUN_ARGS)

demo: install
	$(BIN)/dispatcher demo

lint: install
	$(BIN)/ruff check dispatcher tests benchmarks
	$(BIN)/ruff format --check dispatcher tests benchmarks
	$(BIN)/mypy dispatcher benchmarks
	$(BIN)/lint-imports

format: install
	$(BIN)/ruff check --fix dispatcher tests benchmarks
	$(BIN)/ruff format dispatcher tests benchmarks

# Two lanes. test-fast: tests/unit (pure and unit tests: no database, no
# network beyond 127.0.0.1), in seconds. test: lint, then every test, as CI
# runs it, on TEST_WORKERS parallel workers (pytest-xdist; 0 runs them in
# one process) against DATABASE_URL's server when set, else one embedded
# PostgreSQL in a temporary folder that is removed afterwards. Tests marked
# `serial` (latency asserted under load of their own, or load that would slow
# the others) run after, alone.
TEST_WORKERS ?= 6

# Bytecode written ahead: where PYTHONDONTWRITEBYTECODE is set (these
# machines set it), every process a test starts would compile the package
# from source again, a third of a CLI start's CPU.
PYC := $(PY) -m compileall -q dispatcher tests benchmarks > /dev/null

test-fast: install
	$(PYC)
	$(PY) -m pytest -q -p no:cacheprovider tests/unit $(PYTEST_ARGS)

# Each lane ends with its 20 slowest tests (issue 36: where the time goes).
test: lint
	$(PYC)
	$(PY) -m pytest -q -p no:cacheprovider -n $(TEST_WORKERS) --dist worksteal -m "not serial" --durations=20 $(PYTEST_ARGS)
	$(PY) -m pytest -q -p no:cacheprovider -m serial --durations=20 $(PYTEST_ARGS)

# docs/operations/configuration.md from settings.ENVIRONMENT (a unit test
# fails when the page is stale).
.PHONY: docs
docs: install
	$(PY) -m dispatcher.settings > docs/operations/configuration.md

bench: install
	$(PY) -m benchmarks $(BENCH_ARGS)

# The soak: 20 minutes at half the measured capacity (needs DATABASE_URL);
# shorter with e.g. SOAK_ARGS="--minutes 6". Writes soak-results/.
soak: install
	$(PY) -m benchmarks.soak $(SOAK_ARGS)

clean:
	rm -rf $(VENV) build *.egg-info .mypy_cache .ruff_cache .hypothesis
