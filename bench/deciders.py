"""``python -m bench.deciders [--n 1000] [--deciders 1,2,4]``: W1 with several deciders.

For each decider count, a fresh installation (bench/stack.py: its own
database and namespace, 32 partitions, every service a process, each decider
one more) waits until the deciders' leases are balanced, warms up, and runs
W1 (N executions of 3 sequential tasks, all started at once). It reports
steps/s, the deciders' CPU per step (all deciders together), and each
decider's share of the inputs, counted by its own
``orbit_decider_batch_inputs`` metric: the largest share over the smallest.

On a 2-core machine throughput cannot rise with more deciders (they share
the same two cores with Postgres, RabbitMQ and the rest); what shows whether
sharing the partitions costs anything that grows with the deciders is the
CPU per step. Writes ``bench/results/deciders.json``; not part of the tests.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import asyncpg
import httpx
from prometheus_client.parser import text_string_to_metric_families

from bench import procs, workloads
from bench.counters import Counters
from bench.stack import ROOT, BenchStack

RESULTS = ROOT / "bench" / "results"
_INPUTS = "orbit_decider_batch_inputs_sum"


def _say(line: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {line}", flush=True)


async def _inputs_by_decider(stack: BenchStack) -> dict[str, float]:
    """Inputs each decider has decided so far, from its own /metrics."""
    found: dict[str, float] = {}
    async with httpx.AsyncClient(timeout=10) as http:
        for name, url in stack.metrics_urls().items():
            if not name.startswith("decider"):
                continue
            response = await http.get(url)
            response.raise_for_status()
            found[name] = sum(
                sample.value
                for family in text_string_to_metric_families(response.text)
                for sample in family.samples
                if sample.name == _INPUTS
            )
    return found


async def _wait_balanced(stack: BenchStack, deciders: int, timeout: float = 60) -> float:
    started = time.monotonic()
    while True:
        found = await stack.client.deciders()
        live = [d for d in found["deciders"] if d["live"]]
        if found["balanced"] and len(live) == deciders:
            return time.monotonic() - started
        if time.monotonic() - started > timeout:
            raise RuntimeError(f"{deciders} deciders did not balance within {timeout} s: {found}")
        await asyncio.sleep(0.2)


async def run_one(args: argparse.Namespace, deciders: int) -> dict[str, Any]:
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%S")
    stack = BenchStack(
        args.database_url,
        args.amqp_url,
        RESULTS / "logs" / f"deciders-{deciders}-{stamp}",
        say=_say,
        deciders=deciders,
        decider_batch_size=args.batch_size,
    )
    async with stack:
        balanced = await _wait_balanced(stack, deciders)
        _say(f"{deciders} decider(s) balanced over {stack.partitions} partitions")
        conn = await asyncpg.connect(stack.settings.database_url)
        try:
            counters = Counters(
                conn,
                stack.database,
                {n: p.pid for n, p in stack.procs.items()},
                stack.metrics_urls(),
            )
            await workloads.warm_up(stack, counters, _say)
            inputs_before = await _inputs_by_decider(stack)
            w1 = await workloads.w1(stack, counters, _say, args.n)
            inputs_after = await _inputs_by_decider(stack)
        finally:
            await conn.close()
    cpu = w1["cost"]["cpu_seconds"]
    decider_cpu = sum(seconds for name, seconds in cpu.items() if name.startswith("decider"))
    shares = {name: inputs_after[name] - inputs_before.get(name, 0.0) for name in inputs_after}
    smallest = min(shares.values())
    return {
        "deciders": deciders,
        "partitions": stack.partitions,
        "balanced_after_s": round(balanced, 2),
        "steps_per_s": w1["steps_per_s"],
        "wall_s": w1["wall_s"],
        "decider_batch_size": args.batch_size,
        "batches_per_step": w1["cost"]["per_step"]["pg_write_transactions"],
        "decider_cpu_ms_per_step": round(decider_cpu * 1000 / w1["steps"], 3),
        "inputs_by_decider": {name: round(value) for name, value in shares.items()},
        "largest_share_over_smallest": round(max(shares.values()) / smallest, 3)
        if smallest
        else None,
        "w1": w1,
    }


def _table(rows: list[dict[str, Any]]) -> str:
    lines = [
        "| deciders | steps/s | decider CPU ms/step | write txns/step | largest/smallest share"
        " | inputs by decider |",
        "|---:|---:|---:|---:|---:|---|",
    ]
    for row in rows:
        shares = ", ".join(str(v) for v in row["inputs_by_decider"].values())
        lines.append(
            f"| {row['deciders']} | {row['steps_per_s']} | {row['decider_cpu_ms_per_step']}"
            f" | {row['batches_per_step']} | {row['largest_share_over_smallest']} | {shares} |"
        )
    return "\n".join(lines)


async def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.deciders", description=__doc__)
    parser.add_argument("--n", type=int, default=1000, help="W1 executions per run")
    parser.add_argument("--deciders", default="1,2,4", help="decider counts, comma-separated")
    parser.add_argument(
        "--batch-size",
        type=int,
        help="ORBIT_DECIDER_BATCH_SIZE of every decider (a control: one decider held to the"
        " batches four make)",
    )
    parser.add_argument("--database-url", default="postgresql://postgres@127.0.0.1:5432/postgres")
    parser.add_argument("--amqp-url", default="amqp://guest:guest@127.0.0.1:5672/")
    parser.add_argument("--output", type=Path, default=RESULTS / "deciders.json")
    args = parser.parse_args(argv)
    counts = [int(part) for part in args.deciders.split(",") if part.strip()]
    rows = []
    for deciders in counts:
        _say(f"W1, n={args.n}, with {deciders} decider(s)")
        rows.append(await run_one(args, deciders))
    result = {
        "command": "python -m bench.deciders " + " ".join(sys.argv[1:] if argv is None else argv),
        "started_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "machine": procs.machine(),
        "runs": rows,
    }
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    print(_table(rows))
    base = rows[0]["decider_cpu_ms_per_step"]
    for row in rows[1:]:
        print(
            f"CPU per step with {row['deciders']} deciders:"
            f" {row['decider_cpu_ms_per_step'] / base:.2f}x that with {rows[0]['deciders']}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
