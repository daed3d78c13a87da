"""DBOS Transact, its ordinary way: workflows and steps in the client's own process.

``python -m bench.peers.dbos_peer --database-url URL --output FILE [--w1 N --w2 N --w3 N]``
(in the peers' venv). The system database is a fresh ``orbit_peer_dbos_<random>``
on the same Postgres as Orbit's, dropped at the end. Workflows are called
directly from ``CALLERS`` threads (DBOS's documented synchronous API): each call
runs the workflow in its thread, checkpointing every step in Postgres, and
returns its output. W2's units are child workflows started with
``DBOS.start_workflow`` (they run at once on DBOS's thread pool; a ``Queue``
would add its polling interval), joined by a ``sum`` step.
"""

from __future__ import annotations

import argparse
import json
import secrets
import sys
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from importlib.metadata import version
from typing import Any

import psycopg
from dbos import DBOS, SetWorkflowID

from bench.peers import shapes


@DBOS.step()
def inc(value: int) -> int:
    return value + 1


@DBOS.step()
def add_up(values: list[int]) -> int:
    return sum(values)


@DBOS.workflow()
def sequential(value: int, steps: int) -> int:
    for _ in range(steps):
        value = inc(value)
    return value


@DBOS.workflow()
def unit(number: int) -> int:
    return inc(number)


@DBOS.workflow()
def fan_out(numbers: list[int]) -> dict[str, int]:
    handles = [DBOS.start_workflow(unit, number) for number in numbers]
    values = [handle.get_result() for handle in handles]
    return {"count": len(values), "total": add_up(values)}


def _say(line: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] DBOS: {line}", file=sys.stderr, flush=True)


def _callers(label: str, n: int, one: Callable[[int], Any], want: Callable[[int], Any]) -> float:
    """``n`` calls over ``CALLERS`` threads, each checked; the wall time."""

    def call(i: int) -> Any:
        with SetWorkflowID(f"{label.lower()}-{i}"):
            return one(i)

    t0 = time.monotonic()
    with ThreadPoolExecutor(shapes.CALLERS) as pool:
        outputs = list(pool.map(call, range(n)))
    wall = time.monotonic() - t0
    wrong = [(i, got) for i, got in enumerate(outputs) if got != want(i)]
    if wrong:
        raise SystemExit(f"DBOS {label}: {len(wrong)} of {n} wrong, e.g. {wrong[:3]}")
    _say(f"{label}: {n} checked, wall {wall:.2f} s")
    return wall


def run(n_w1: int, n_w2: int, n_w3: int) -> dict[str, Any]:
    sequential(0, 1)  # warm-up: the first call pays for connections and caches
    wall = _callers(
        "W1",
        n_w1,
        lambda i: sequential(i, shapes.W1_STEPS),
        lambda i: shapes.sequential_output(i, shapes.W1_STEPS),
    )
    w1 = {"executions": n_w1, "wall_s": round(wall, 3), "steps_per_s": n_w1 * 3 / wall}
    steps = shapes.W2_WIDTH + 1
    wall = _callers(
        "W2",
        n_w2,
        lambda i: fan_out(shapes.fan_out_input(i)),
        lambda i: {"count": shapes.W2_WIDTH, "total": shapes.fan_out_total(i)},
    )
    w2 = {"executions": n_w2, "wall_s": round(wall, 3), "steps_per_s": n_w2 * steps / wall}
    round_trips = []
    for r in range(n_w3):
        t0 = time.monotonic()
        with SetWorkflowID(f"w3-{r}"):
            got = sequential(r, shapes.W3_STEPS)
        round_trips.append(time.monotonic() - t0)
        if got != shapes.sequential_output(r, shapes.W3_STEPS):
            raise SystemExit(f"DBOS W3: run {r} answered {got}")
    _say(f"W3: {n_w3} checked")
    w3 = {
        "runs": n_w3,
        "round_trip_ms_per_step_p50": shapes.percentile(round_trips, 50) * 1000 / shapes.W3_STEPS,
    }
    return {"W1": w1, "W2": w2, "W3": w3}


def main() -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.peers.dbos_peer")
    parser.add_argument("--database-url", required=True, help="a Postgres server's URL")
    parser.add_argument("--output", required=True)
    for key, size in shapes.SIZES.items():
        parser.add_argument(f"--{key.lower()}", type=int, default=size)
    args = parser.parse_args()
    database = f"orbit_peer_dbos_{secrets.token_hex(4)}"
    server = args.database_url
    with psycopg.connect(server, autocommit=True) as admin:
        admin.execute(f'CREATE DATABASE "{database}"')
    url = server.rsplit("/", 1)[0] + f"/{database}"
    try:
        DBOS(
            config={"name": "orbit-bench-peer", "system_database_url": url, "log_level": "WARNING"}
        )
        DBOS.launch()
        _say(f"launched on {database}")
        result = run(args.w1, args.w2, args.w3)
    finally:
        DBOS.destroy()
        with psycopg.connect(server, autocommit=True) as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{database}" WITH (FORCE)')
    result["settings"] = {
        "version": f"dbos {version('dbos')}",
        "how": "workflows and steps in the bench's process (DBOS's ordinary, direct way),"
        " the system database in Postgres; defaults otherwise",
        "started_and_waited": f"W1, W2: {shapes.CALLERS} threads, each calling a workflow"
        " function and getting its output; W3: one call at a time",
        "fan_out": "20 child workflows by DBOS.start_workflow, joined by handle.get_result()",
    }
    with open(args.output, "w") as out:
        json.dump(result, out, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
