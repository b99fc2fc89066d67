# Two commands on a fresh machine: `make demo` and `make test`.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo test check lint bench docs clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	# torch named with its version: the CPU build pip finds beside its index, never CUDA wheels of GBs
	$(BIN)/python -m pip install --quiet -e '.[test,bench,formats,s3,docs,lint,export,torch,grain]' \
		'torch==2.13.0'
	touch $(STAMP)

demo: $(STAMP)
	$(BIN)/python data/demo.py

LINTED := chunkfit tests benchmarks data docs cli.py

# Style, types and the layering (import-linter contracts in pyproject.toml).
lint: $(STAMP)
	$(BIN)/ruff check $(LINTED)
	$(BIN)/ruff format --check $(LINTED)
	$(BIN)/mypy chunkfit
	$(BIN)/lint-imports

# Whole test modules run in parallel processes, one per core up to 4 (TEST_WORKERS=0 runs them in this one).
TEST_WORKERS ?= auto
PYTEST := $(BIN)/python -m pytest -q -n $(TEST_WORKERS) --maxprocesses=4 --dist loadfile --no-loadscope-reorder

# The whole suite, after the lint.
test: lint
	$(PYTEST)

# The inner loop (a minute or two): lint, then the unit tests of the pure parts and the store and
# ingest tests that train nothing.
FAST_TESTS := tests/core tests/store/test_store.py tests/ingest/test_ingest.py tests/ingest/formats \
	tests/train/test_progress.py tests/train/test_engines.py tests/train/tensorflow/test_cluster.py \
	tests/test_config_rules.py tests/test_public_surface.py tests/test_docs.py
check: lint
	$(PYTEST) -m "not slow" $(FAST_TESTS)

bench: $(STAMP)
	$(BIN)/python benchmarks/ingest.py
	$(BIN)/python benchmarks/train.py

# The documentation site, into site/; --strict turns a broken link or anchor into a failure.
docs: $(STAMP)
	NO_MKDOCS_2_WARNING=1 $(BIN)/python -m mkdocs build --strict

clean:
	rm -rf $(VENV) demo-out .pytest_cache site
