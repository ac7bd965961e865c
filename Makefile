# MetaService entry points. `make demo` and `make test` set everything up from a fresh clone.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
FORMAT ?= delta

.PHONY: install demo test test-fast soak serve lint typecheck typecheck-integrations docs bench clean venv-airflow venv-dagster

install: $(STAMP)

$(STAMP): pyproject.toml setup.py
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[all,dev]'
	touch $(STAMP)

# The orchestrator packages (integrations/*) each get a virtualenv of their own, so that the pins of Airflow and
# Dagster never constrain the server's: the root project from this checkout (no extras: the client's HTTP part),
# the package, and pytest. tests/test_integrations.py makes them when missing and runs integrations/*/tests in
# them. uv (a dev dependency) when the main venv has it, else pip. Rebuilt when a pyproject changes.
UV := $(wildcard $(BIN)/uv)
ORCH_PYTHON ?= $(shell command -v python3.11 || command -v $(PYTHON))
define orch_venv
	rm -rf $(1)
	$(if $(UV),$(UV) venv --quiet --python $(ORCH_PYTHON) $(1),$(ORCH_PYTHON) -m venv $(1))
	$(if $(UV),$(UV) pip install --quiet --python $(1)/bin/python,$(1)/bin/pip install --quiet) \
	  -e . -e 'integrations/$(2)[test]'
	touch $(1)/.installed
endef

venv-airflow: .venv-airflow/.installed
.venv-airflow/.installed: pyproject.toml setup.py integrations/airflow/pyproject.toml
	$(call orch_venv,.venv-airflow,airflow)

venv-dagster: .venv-dagster/.installed
.venv-dagster/.installed: pyproject.toml setup.py integrations/dagster/pyproject.toml
	$(call orch_venv,.venv-dagster,dagster)

demo: install
	$(BIN)/python -m demo --format $(FORMAT)

test: install
	$(BIN)/pytest -n 2 --dist loadgroup -m "not soak"

# Everything but the slow tests and those under tests/spark, tests/browser, tests/crash and tests/faults (their
# directories mark them): no JVM starts (tests/conftest.py fails a test that starts one), nothing is killed.
test-fast: install
	$(BIN)/pytest -n 2 --dist loadgroup -m "not slow and not spark and not crash and not browser"

# The model-based walk over a changing lineage (tests/model), 10,000 steps, then the concurrent checker
# (tests/checker) for six 5-minute runs with fresh seeds; each prints its figures. METASERVICE_SOAK_STEPS sets the
# walk's length, METASERVICE_MODEL_SEED replays a walk; METASERVICE_CHECKER_SECONDS sets each checker run's length,
# METASERVICE_CHECKER_SEED replays one.
soak: install
	METASERVICE_SOAK_STEPS=$${METASERVICE_SOAK_STEPS:-10000} $(BIN)/pytest -p no:cacheprovider -s -q tests/model/test_walk.py
	METASERVICE_STREAM_MATRIX=full $(BIN)/pytest -p no:cacheprovider -q -m soak tests/streaming
	$(BIN)/pytest -n 2 -p no:cacheprovider -q -m soak tests/spark/test_mode_crashes.py tests/spark/test_job.py
	for run in 1 2 3 4 5 6; do \
	  METASERVICE_CHECKER_SECONDS=$${METASERVICE_CHECKER_SECONDS:-300} \
	    $(BIN)/pytest -p no:cacheprovider -s -q tests/checker || exit 1; \
	done

serve: install
	$(BIN)/metaservice serve

lint: install
	$(BIN)/ruff check metaservice spark_client tests bench migrations demo setup.py docs/examples integrations
	$(BIN)/ruff format --check metaservice spark_client tests bench migrations demo setup.py docs/examples integrations
	$(BIN)/lint-imports  # the import layers contract (.importlinter, docs/design.md "Code layout")

# mypy --strict (pyproject.toml) over the code, its tests and the benchmarks.
typecheck: install
	$(BIN)/mypy metaservice spark_client tests bench demo docs/examples

# mypy --strict over the orchestrator packages, against their own virtualenvs' Airflow and Dagster (the client they
# import is checked by `make typecheck`, where pyspark and the format libraries are installed).
typecheck-integrations: install venv-airflow venv-dagster
	$(BIN)/mypy --python-executable .venv-airflow/bin/python --strict --follow-imports=silent integrations/airflow/src
	$(BIN)/mypy --python-executable .venv-dagster/bin/python --strict --follow-imports=silent integrations/dagster/src

# The documentation site (mkdocs.yml) into build/site; --strict: a broken link or anchor, or a page missing from
# the nav, fails the build.
docs: install
	$(BIN)/mkdocs build --strict

bench: install
	$(BIN)/python -m bench

clean:
	rm -rf $(VENV) .venv-airflow .venv-dagster .pytest_cache .mypy_cache .ruff_cache .test-pg
