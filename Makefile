# One task runner for Orbit. `make demo` runs Orbit, `make test` runs the tests;
# both install everything they need into .venv from requirements.lock first.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
UV_VERSION := 0.13.8
PYTEST_WORKERS ?= auto

.PHONY: install test test-cluster test-abuse lint format demo bench bench-peers lock lock-peers asyncapi clean compose-secrets console-screenshots bench-console bench-cli

install: $(VENV)/.installed

# The three distributions of the workspace (pyproject.toml), editable, over the pins.
DISTRIBUTIONS := libs/orbit_model libs/orbit_sdk services
PROJECTS := $(addsuffix /pyproject.toml,$(DISTRIBUTIONS))

$(VENV)/.installed: requirements.lock pyproject.toml $(PROJECTS)
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet uv==$(UV_VERSION)
	$(BIN)/uv pip install --quiet --python $(BIN)/python -r requirements.lock
	$(BIN)/uv pip install --quiet --python $(BIN)/python --no-deps $(addprefix -e ,$(DISTRIBUTIONS))
	touch $@

test: install
	$(BIN)/pytest -n $(PYTEST_WORKERS)

# The RabbitMQ cluster test: three nodes of its own (ops/rabbitmq/cluster.sh) and
# eleven service processes, too heavy beside the rest, so on its own.
test-cluster: install
	$(BIN)/pytest -m cluster

# Attacks on the gateway (tests/abuse), one at a time: each runs against a gateway
# process while its memory is measured and a client with a token is answered
# (docs/security.md, "Availability").
test-abuse: install
	$(BIN)/pytest -m abuse tests/abuse

# The console's screenshots in docs/console.md: its browser tests (Debian's chromium)
# save each page they visit as they pass.
console-screenshots: install
	ORBIT_CONSOLE_SCREENSHOTS=docs/console $(BIN)/pytest -p no:randomly tests/browser -q

# import-linter keeps the boundaries: the model imports nothing of the others, the
# SDK nothing of the server, no service another, and only the store imports asyncpg.
lint: install
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy
	$(BIN)/lint-imports

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

# Orbit beside DBOS Transact and Celery, in one run: the peers get a venv of their
# own (bench/peers/.venv, from bench/peers/requirements.lock), so that their
# dependencies never meet Orbit's. BENCH_PEERS_ARGS="--quick" for a small run.
PEERS_VENV := bench/peers/.venv

$(PEERS_VENV)/.installed: bench/peers/requirements.lock $(VENV)/.installed
	$(PYTHON) -m venv $(PEERS_VENV)
	$(BIN)/uv pip install --quiet --python $(PEERS_VENV)/bin/python -r bench/peers/requirements.lock
	touch $@

# C1, the console's executions list at 100,000 executions (bench/console.py):
# BENCH_CONSOLE_ARGS="--executions 10000" for a small run.
BENCH_CONSOLE_ARGS ?=
bench-console: install
	$(BIN)/python -m bench.console $(BENCH_CONSOLE_ARGS)

# C2, what the SDK costs a process before it does anything: orbit --help, orbit validate,
# the worker's and the client's imports (bench/cli.py).
BENCH_CLI_ARGS ?=
bench-cli: install
	$(BIN)/python -m bench.cli $(BENCH_CLI_ARGS)

bench-peers: install $(PEERS_VENV)/.installed
	$(BIN)/python -m bench.peers.run $(BENCH_PEERS_ARGS)

lock-peers: install
	$(BIN)/uv pip compile --quiet bench/peers/requirements.in --python-version 3.11 \
		-o bench/peers/requirements.lock

# Re-pin every dependency after editing a pyproject.toml: the three distributions
# with every extra, and the workspace's dev group; the distributions themselves
# are installed from here (editable), so the lock names only what they need.
lock: install
	$(BIN)/uv pip compile --quiet $(PROJECTS) --all-extras --group pyproject.toml:dev \
		--python-version 3.11 --no-emit-package orbit-model --no-emit-package orbit-sdk \
		--no-emit-package orbit-server -o requirements.lock

# Regenerate the AsyncAPI document of the AMQP protocol from the code (FastStream,
# no broker needed); tests/unit/test_asyncapi.py fails when it is stale.
asyncapi: install
	$(BIN)/python -m tools.asyncapi > docs/asyncapi.json.tmp
	mv docs/asyncapi.json.tmp docs/asyncapi.json

clean:
	rm -rf $(VENV) .mypy_cache .ruff_cache .pytest_cache .hypothesis

# The .env compose.yaml needs: random Postgres and RabbitMQ passwords and an admin
# API token (kept when .env holds them already); docs/operations.md, "Containers".
compose-secrets:
	$(PYTHON) ops/compose/write_env.py .env
