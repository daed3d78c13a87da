"""``python -m bench.run [--quick] [--workloads W1,W3] [--n-w1 N …]``: run Orbit's benchmark.

Starts its own Orbit (each service a process, the no-op worker another)
against the local Postgres and RabbitMQ, measures the machine's limits,
runs the workloads, checks every result, writes ``bench/results/latest.json``
and prints a table. Exit status 1 if any check failed.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import platform
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import aio_pika
import asyncpg

from bench import client_path, huge, limits, procs, workloads
from bench.counters import Counters
from bench.report import table
from bench.stack import ROOT, BenchStack

RESULTS = ROOT / "bench" / "results"
DEFAULTS = {
    "W1": 1000,
    "W1H": 500,
    "W2": 100,
    "W2H": 50,
    "W3": 20,
    "L1": 100,
    "W4": 20_000,
    "S1": 10_000,
    "S2": 50_000,
    "L2": 10_000,
    "W5": 10_000,
    "W6": 50_000,
}
QUICK = {
    "W1": 200,
    "W1H": 100,
    "W2": 20,
    "W2H": 10,
    "W3": 10,
    "L1": 20,
    "W4": 2_000,
    "S1": 1_000,
    "S2": 5_000,
    "L2": 1_000,
    "W5": 1_000,
    "W6": 5_000,
}
DEFAULT_WORKLOADS = "W1,W1H,W2,W3,L1,W4,S1,S2,L2"
"""In this order: S1's and S2's executions wait forever, so they come after the others."""
RUNNERS = {
    "W1": workloads.w1,
    "W2": workloads.w2,
    "W3": workloads.w3,
    "W4": workloads.w4,
    "W1H": client_path.w1h,
    "W2H": client_path.w2h,
    "S1": client_path.s1,
    "S2": client_path.s2,
    "L1": client_path.l1,
    "L2": client_path.l2,
    "W5": huge.w5,
    "W6": huge.w6,
}
NOTE = (
    "All on one 2-core machine: the four services (one process each), Postgres, RabbitMQ,"
    " the worker process and the bench itself share its cores."
)


def _say(line: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {line}", flush=True)


def _args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench.run", description=__doc__)
    parser.add_argument(
        "--quick",
        action="store_true",
        help="smaller sizes: " + ", ".join(f"{k} {v}" for k, v in QUICK.items()),
    )
    parser.add_argument(
        "--workloads",
        default=DEFAULT_WORKLOADS,
        help=f"comma-separated, of {', '.join(DEFAULTS)} (default {DEFAULT_WORKLOADS};"
        " W5 and W6, one huge execution, only when named)",
    )
    parser.add_argument("--n", type=int, help="the size of every workload chosen (overrides)")
    for key in DEFAULTS:
        parser.add_argument(f"--n-{key.lower()}", type=int, help=f"size of {key}")
    parser.add_argument("--database-url", default="postgresql://postgres@127.0.0.1:5432/postgres")
    parser.add_argument("--amqp-url", default="amqp://guest:guest@127.0.0.1:5672/")
    parser.add_argument("--worker-concurrency", type=int, default=64)
    parser.add_argument(
        "--gateways",
        type=int,
        default=1,
        help="gateway replicas (L2 spreads its waiters over them)",
    )
    parser.add_argument(
        "--no-limits", action="store_true", help="skip measuring the machine's limits"
    )
    parser.add_argument("--output", type=Path, default=RESULTS / "latest.json")
    return parser.parse_args(argv)


async def _versions(database_url: str, amqp_url: str) -> dict[str, str]:
    conn = await asyncpg.connect(database_url)
    try:
        postgres = await conn.fetchval("SHOW server_version")
        commit = {
            name: await conn.fetchval(f"SHOW {name}")
            for name in ("synchronous_commit", "fsync", "commit_delay", "shared_buffers")
        }
    finally:
        await conn.close()
    connection = await aio_pika.connect(amqp_url)
    try:
        props = connection.transport.connection.server_properties  # type: ignore[union-attr]
        rabbit = props.get("version", "?")
        rabbit = rabbit.decode() if isinstance(rabbit, bytes) else str(rabbit)
    finally:
        await connection.close()
    return {"postgres": postgres, "rabbitmq": rabbit, "postgres_settings": commit}


def _huge_stack(chosen: list[str]) -> dict[str, Any]:
    """What W5 and W6 need of the stack: their workflows, and W6 a longer history."""
    options: dict[str, Any] = {}
    if {"W5", "W6"} & set(chosen):
        options["definitions"] = huge.DEFINITIONS
    if "W6" in chosen:
        options["service_env"] = {"ORBIT_MAX_HISTORY_EVENTS": str(huge.W6_HISTORY_LIMIT)}
    return options


async def main(argv: list[str] | None = None) -> int:
    args = _args(argv)
    chosen = [w.strip().upper() for w in args.workloads.split(",") if w.strip()]
    unknown = [w for w in chosen if w not in DEFAULTS]
    if unknown:
        print(
            f"unknown workload {unknown[0]}; the workloads: {', '.join(DEFAULTS)}", file=sys.stderr
        )
        return 2
    sizes = dict(QUICK if args.quick else DEFAULTS)
    for key in DEFAULTS:
        override = getattr(args, f"n_{key.lower()}") or args.n
        if override:
            sizes[key] = override
    command = "python -m bench.run " + " ".join(sys.argv[1:] if argv is None else argv)
    versions = await _versions(args.database_url, args.amqp_url)
    result: dict[str, Any] = {
        "command": command.strip(),
        "started_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "machine": {
            **procs.machine(),
            "python": platform.python_version(),
            "postgres": versions["postgres"],
            "postgres_settings": versions["postgres_settings"],
            "rabbitmq": versions["rabbitmq"],
        },
        "note": NOTE,
        "sizes": {k: sizes[k] for k in chosen},
        "limits": {},
        "workloads": {},
    }
    _say(f"Orbit benchmark: {', '.join(f'{k} n={sizes[k]}' for k in chosen)}")
    failed: str | None = None
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%S")
    stack = BenchStack(
        args.database_url,
        args.amqp_url,
        RESULTS / "logs" / stamp,
        say=_say,
        worker_concurrency=args.worker_concurrency,
        gateways=args.gateways,
        **_huge_stack(chosen),
    )
    async with stack:
        result["orbit"] = {
            "services": {name: proc.pid for name, proc in stack.procs.items()},
            "decider_partitions": stack.partitions,
            "worker_concurrency": args.worker_concurrency,
            "database": stack.database,
            "namespace": stack.namespace,
            "logs": str(stack.log_dir.relative_to(ROOT)),
        }
        conn = await asyncpg.connect(stack.settings.database_url)
        try:
            counters = Counters(
                conn,
                stack.database,
                {n: p.pid for n, p in stack.procs.items()},
                stack.metrics_urls(),
            )
            if not args.no_limits:
                _say("machine limits: Postgres single-row commits (3 s, 1 then 8 connections)")
                result["limits"]["pg_commits_1_connection"] = await limits.commits_per_second(
                    stack.settings.database_url, 1
                )
                result["limits"]["pg_commits_8_connections"] = await limits.commits_per_second(
                    stack.settings.database_url, 8
                )
                _say("machine limits: RabbitMQ persistent confirmed publishes (3 s)")
                result["limits"][
                    "amqp_confirmed_publishes"
                ] = await limits.confirmed_publishes_per_second(
                    args.amqp_url, f"{stack.namespace}.bench-limit"
                )
                for name, figure in result["limits"].items():
                    _say(f"  {name}: {figure['per_second']}/s")
            await workloads.warm_up(stack, counters, _say)
            _say("idle background: counters over 3 s with nothing running")
            idle_before = await counters.snapshot()
            await asyncio.sleep(3.0)
            idle_after = await counters.snapshot()
            idle = counters.delta(idle_before, idle_after, 0, 0.0)
            span = idle["interval_s"]
            result["idle_background"] = {
                "interval_s": span,
                "pg_write_transactions_per_s": round(
                    idle["postgres_cluster"]["write_transactions"] / span, 1
                ),
                "cpu_seconds": idle["cpu_seconds"],
                "is": "what the services cost doing nothing (timer poll, sweeps, heartbeats);"
                " included in every workload's cost figures",
            }
            _say(
                "  idle: "
                f"{result['idle_background']['pg_write_transactions_per_s']} write transactions/s"
            )
            for key in chosen:
                try:
                    result["workloads"][key] = await RUNNERS[key](stack, counters, _say, sizes[key])
                except workloads.CheckFailed as error:
                    failed = str(error)
                    result["workloads"][key] = {"failed": failed}
                    _say(f"CHECK FAILED: {failed}")
                    break
        finally:
            await conn.close()
    result["finished_at"] = datetime.now(UTC).isoformat(timespec="seconds")
    result["machine"]["loadavg_at_end"] = Path("/proc/loadavg").read_text().split()[:3]
    result["failed"] = failed
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps(result, indent=2, default=str) + "\n")
    _say(
        f"wrote {args.output.relative_to(ROOT) if args.output.is_relative_to(ROOT) else args.output}"  # noqa: E501
    )
    if failed:
        print(f"\nFAILED: {failed}", file=sys.stderr)
        return 1
    print()
    print(table(result))
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
