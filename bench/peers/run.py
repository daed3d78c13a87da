"""``python -m bench.peers.run [--quick]``: W1, W2 and W3 on Orbit, DBOS Transact and Celery,
in one run on this machine; one table with the ratios (``make bench-peers``).

Orbit runs as ``make bench`` runs it (each service a process, the no-op worker
another) and is driven the way its users start and wait: ``OrbitClient.start(...,
wait=True)`` over HTTP from 16 concurrent callers (W1, W2), and one at a time
(W3). Each peer then runs the same workloads its own ordinary way, in the
peers' venv (``bench/peers/.venv``): see ``dbos_peer`` and ``celery_peer``.
Every answer of every system is checked; a wrong one fails the run (exit 1).
Writes ``bench/results/peers.json``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import asyncpg

from bench import client_path, procs, workloads
from bench.counters import Counters
from bench.peers import shapes
from bench.stack import ROOT, BenchStack
from bench.workloads import CheckFailed

RESULTS = ROOT / "bench" / "results"
PEERS_PYTHON = ROOT / "bench" / "peers" / ".venv" / "bin" / "python"
TARGETS = {
    "W1": {"DBOS": 3.0, "Celery": 1.0},
    "W2": {"DBOS": 3.0},
    "W3": {"DBOS": 1.0, "Celery": 1.0},
}
"""Issue 17's targets, as Orbit ÷ peer: at least this for W1 and W2 (steps/s), at most
this for W3 (ms per step: lower is better)."""


def _say(line: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {line}", flush=True)


async def _orbit(args: argparse.Namespace, sizes: dict[str, int]) -> dict[str, Any]:
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%S")
    stack = BenchStack(args.database_url, args.amqp_url, RESULTS / "logs" / stamp, say=_say)
    async with stack:
        connection = await asyncpg.connect(stack.settings.database_url)
        try:
            pids = {name: proc.pid for name, proc in stack.procs.items()}
            counters = Counters(connection, stack.database, pids, stack.metrics_urls())
            await workloads.warm_up(stack, counters, _say)
            w1 = await client_path.w1h(stack, counters, _say, sizes["W1"])
            w2 = await client_path.w2h(stack, counters, _say, sizes["W2"])
            w3 = await workloads.w3(stack, counters, _say, sizes["W3"])
        finally:
            await connection.close()
    return {
        "W1": {
            "executions": w1["executions"],
            "wall_s": w1["wall_s"],
            "steps_per_s": w1["steps_per_s"],
        },
        "W2": {
            "executions": w2["executions"],
            "wall_s": w2["wall_s"],
            "steps_per_s": w2["steps_per_s"],
        },
        "W3": {
            "runs": w3["runs"],
            "round_trip_ms_per_step_p50": w3["client_round_trip_ms_per_step"]["p50"],
        },
        "settings": {
            "how": "decider, dispatcher, timer and gateway each a process, one worker process"
            " (concurrency 64), as `make bench` runs them; auth on, a RabbitMQ user per role",
            "started_and_waited": f"W1, W2: {shapes.CALLERS} concurrent callers of"
            " OrbitClient.start(..., wait=True) (POST /v1/executions?wait=, answered when the"
            " ending's NOTIFY reaches the gateway); W3: one at a time",
            "fan_out": "a `for` step of 20 units joined by a `sum` step",
        },
    }


async def _peer(name: str, module: str, extra: list[str]) -> dict[str, Any]:
    """Run a peer's program in the peers' venv; its JSON result."""
    with tempfile.TemporaryDirectory() as scratch:
        output = Path(scratch) / "result.json"
        process = await asyncio.create_subprocess_exec(
            str(PEERS_PYTHON),
            "-m",
            module,
            "--output",
            str(output),
            *extra,
            cwd=ROOT,
            env={
                **{
                    k: v
                    for k, v in os.environ.items()
                    if not k.startswith(("ORBIT_", "VIRTUAL_ENV"))
                },
                "PYTHONPATH": str(ROOT),
            },
        )
        if await process.wait() != 0:
            raise CheckFailed(f"{name} failed (exit {process.returncode}): its output is above")
        result: dict[str, Any] = json.loads(output.read_text())
        return result


def _ratio(orbit: dict[str, Any] | None, peer: dict[str, Any] | None, key: str) -> float | None:
    if not orbit or not peer:
        return None
    return round(orbit[key] / peer[key], 2)


def _rows(results: dict[str, dict[str, Any]]) -> list[dict[str, Any]]:
    rows = []
    for workload, key, unit in (
        ("W1", "steps_per_s", "steps/s"),
        ("W2", "steps_per_s", "steps/s"),
        ("W3", "round_trip_ms_per_step_p50", "client round trip ms/step, p50"),
    ):
        row: dict[str, Any] = {"workload": workload, "figure": unit}
        for system, result in results.items():
            figure = result.get(workload)
            row[system] = None if figure is None else round(figure[key], 2)
        for peer in ("DBOS", "Celery"):
            ratio = _ratio(results["Orbit"].get(workload), results[peer].get(workload), key)
            target = TARGETS[workload].get(peer)
            met = None
            if ratio is not None and target is not None:
                met = ratio >= target if workload != "W3" else ratio <= target
            row[f"Orbit/{peer}"] = {"ratio": ratio, "target": target, "met": met}
        rows.append(row)
    return rows


def _table(rows: list[dict[str, Any]]) -> str:
    def cell(value: Any) -> str:
        return "n/a" if value is None else f"{value:g}"

    def ratio(entry: dict[str, Any]) -> str:
        if entry["ratio"] is None:
            return "n/a"
        if entry["target"] is None:
            return f"{entry['ratio']:g}x"
        verdict = "met" if entry["met"] else "missed"
        return f"{entry['ratio']:g}x ({verdict}: {entry['target']:g}x)"

    lines = [
        f"{'workload':<9}{'figure':<33}{'Orbit':>9}{'DBOS':>9}{'Celery':>9}"
        f"  {'Orbit/DBOS':<20}{'Orbit/Celery':<20}",
    ]
    for row in rows:
        lines.append(
            f"{row['workload']:<9}{row['figure']:<33}{cell(row['Orbit']):>9}"
            f"{cell(row['DBOS']):>9}{cell(row['Celery']):>9}"
            f"  {ratio(row['Orbit/DBOS']):<20}{ratio(row['Orbit/Celery']):<20}"
        )
    lines.append(
        "W1, W2: higher is better, the target is a ratio at least as high; W3: lower is"
        " better, the target a ratio at most as high."
    )
    return "\n".join(lines)


async def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.peers.run", description=__doc__)
    parser.add_argument("--quick", action="store_true", help=f"sizes {shapes.QUICK}")
    parser.add_argument("--database-url", default="postgresql://postgres@127.0.0.1:5432/postgres")
    parser.add_argument("--amqp-url", default="amqp://guest:guest@127.0.0.1:5672/")
    parser.add_argument("--output", type=Path, default=RESULTS / "peers.json")
    args = parser.parse_args(argv)
    if not PEERS_PYTHON.exists():
        print("the peers' venv is missing: run `make bench-peers`", file=sys.stderr)
        return 2
    sizes = dict(shapes.QUICK if args.quick else shapes.SIZES)
    _say(f"Orbit and its peers: {', '.join(f'{k} n={v}' for k, v in sizes.items())}")
    size_args = [f"--{k.lower()}={v}" for k, v in sizes.items()]
    try:
        results = {"Orbit": await _orbit(args, sizes)}
        _say("DBOS Transact: the same workloads")
        results["DBOS"] = await _peer(
            "DBOS", "bench.peers.dbos_peer", ["--database-url", args.database_url, *size_args]
        )
        _say("Celery: the same workloads (W2 is not run: see bench/peers/celery_peer.py)")
        celery_url = args.amqp_url.rstrip("/") + "//"  # kombu's spelling of the vhost "/"
        results["Celery"] = await _peer(
            "Celery",
            "bench.peers.celery_peer",
            ["--amqp-url", celery_url, f"--w1={sizes['W1']}", f"--w3={sizes['W3']}"],
        )
    except CheckFailed as failure:
        print(f"\nFAILED: {failure}", file=sys.stderr)
        return 1
    rows = _rows(results)
    report = {
        "command": "python -m bench.peers.run " + " ".join(sys.argv[1:] if argv is None else argv),
        "started_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "machine": procs.machine(),
        "sizes": sizes,
        "callers": shapes.CALLERS,
        "results": results,
        "table": rows,
    }
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps(report, indent=2) + "\n")
    print()
    print(_table(rows))
    for system, result in results.items():
        print(f"\n{system}: " + "; ".join(f"{k}: {v}" for k, v in result["settings"].items()))
    _say(f"wrote {args.output}")
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
