# One task runner for Orbit. `make demo` runs Orbit, `make test` runs the tests;
# both install everything they need into .venv from requirements.lock first.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
UV_VERSION := 0.13.8
PYTEST_WORKERS ?= auto

.PHONY: install test lint format demo bench lock asyncapi clean

install: $(VENV)/.installed

$(VENV)/.installed: requirements.lock pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet uv==$(UV_VERSION)
	$(BIN)/uv pip install --quiet --python $(BIN)/python -r requirements.lock
	$(BIN)/uv pip install --quiet --python $(BIN)/python --no-deps -e .
	touch $@

test: install
	$(BIN)/pytest -n $(PYTEST_WORKERS)

lint: install
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy

format: install
	$(BIN)/ruff check --fix .
	$(BIN)/ruff format .

# Every service in one process against the local Postgres and RabbitMQ: the
# examples are deployed, their worker started and one order run; then it keeps
# serving (gateway on :8080) until Ctrl-C.
demo: install
	$(BIN)/orbit dev --demo

# The benchmark (bench/README.md): its own database and namespace, each service a
# process, W1-W4 by default (about 3 minutes); BENCH_ARGS="--quick" or "--workloads W1,W3".
BENCH_ARGS ?=
bench: install
	$(BIN)/python -m bench.run $(BENCH_ARGS)

# Re-pin every dependency after editing pyproject.toml.
lock: install
	$(BIN)/uv pip compile --quiet pyproject.toml --extra dev --python-version 3.11 -o requirements.lock

# Regenerate the AsyncAPI document of the AMQP protocol from the code (FastStream,
# no broker needed); tests/unit/test_asyncapi.py fails when it is stale.
asyncapi: install
	$(BIN)/python -m orbit_runtime.asyncapi > docs/asyncapi.json.tmp
	mv docs/asyncapi.json.tmp docs/asyncapi.json

clean:
	rm -rf $(VENV) .mypy_cache .ruff_cache .pytest_cache .hypothesis
