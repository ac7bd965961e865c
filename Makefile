# MetaService entry points. `make demo` and `make test` set everything up from a fresh clone.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
FORMAT ?= delta

.PHONY: install demo test test-fast soak serve lint typecheck docs bench clean

install: $(STAMP)

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[spark,dev]'
	touch $(STAMP)

demo: install
	$(BIN)/python -m metaservice.demo --format $(FORMAT)

test: install
	$(BIN)/pytest -n 2 --dist loadgroup

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
	METASERVICE_STREAM_MATRIX=full $(BIN)/pytest -p no:cacheprovider -q tests/streaming/test_crash_matrix.py
	for run in 1 2 3 4 5 6; do \
	  METASERVICE_CHECKER_SECONDS=$${METASERVICE_CHECKER_SECONDS:-300} \
	    $(BIN)/pytest -p no:cacheprovider -s -q tests/checker || exit 1; \
	done

serve: install
	$(BIN)/metaservice serve

lint: install
	$(BIN)/ruff check metaservice spark_client tests bench migrations
	$(BIN)/ruff format --check metaservice spark_client tests bench migrations

# mypy --strict (pyproject.toml) over the code, its tests and the benchmarks.
typecheck: install
	$(BIN)/mypy metaservice spark_client tests bench

# The documentation site (mkdocs.yml) into build/site; --strict: a broken link or anchor, or a page missing from
# the nav, fails the build.
docs: install
	$(BIN)/mkdocs build --strict

bench: install
	$(BIN)/python -m bench

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache .test-pg
