"""Counted cost: Postgres write transactions and WAL, statements and RabbitMQ messages,
and the CPU of every process, as deltas.

Statements and messages come from Orbit's own counters, scraped from the
``/metrics`` of every service and of the worker (and read from this
process's registry for what the bench's own client publishes):
``orbit_postgres_statements_total`` (every statement sent, BEGIN and COMMIT
included) and ``orbit_amqp_messages_published_total`` (every message
published, each confirmed; each is consumed once, so it is also the count of
messages through the broker).

Write transactions are the delta of the next transaction id
(``pg_snapshot_xmax(pg_current_snapshot())``): every transaction that writes
takes one id, read-only ones (the bench's polls) take none. WAL is the delta of
``pg_current_wal_lsn()``. Both are exact but for the whole cluster: anything
else using this Postgres meanwhile counts too.

``pg_stat_database.xact_commit`` is *not* used: measured on this server, a
backend that stays connected does not report its commits there until it
disconnects (500 autocommitted statements showed as 9 after 5 s, 508 after
the close), and the services' connections live for the whole run.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from typing import Any

import asyncpg
import httpx
from prometheus_client import REGISTRY
from prometheus_client.parser import text_string_to_metric_families

from bench import procs

_COUNTED = ("orbit_postgres_statements_total", "orbit_amqp_messages_published_total")

_STAT_FLUSH_WAIT = 1.5  # backends report their counters at most once a second


@dataclass
class Snapshot:
    db: dict[str, int]
    wal: dict[str, int]
    cpu: dict[str, float]
    own_queries: int
    at: float
    counted: dict[str, float] = field(default_factory=dict)
    """Orbit's own counters, summed over its processes."""


@dataclass
class Counters:
    """Reads the counters through one connection; ``own_queries`` counts the bench's polls."""

    conn: asyncpg.Connection
    database: str
    pids: dict[str, int]
    metrics_urls: dict[str, str] = field(default_factory=dict)
    own_queries: int = 0
    extra: dict[str, Any] = field(default_factory=dict)

    async def fetch(self, query: str, *args: Any) -> list[asyncpg.Record]:
        self.own_queries += 1
        return await self.conn.fetch(query, *args)

    async def fetchval(self, query: str, *args: Any) -> Any:
        self.own_queries += 1
        return await self.conn.fetchval(query, *args)

    async def snapshot(self) -> Snapshot:
        await asyncio.sleep(_STAT_FLUSH_WAIT)
        # Three transactions of our own: the clear and the two reads.
        await self.fetch("SELECT pg_stat_clear_snapshot()")
        row = (
            await self.fetch(
                "SELECT pg_snapshot_xmax(pg_current_snapshot())::text::bigint AS xid,"
                " pg_wal_lsn_diff(pg_current_wal_lsn(), '0/0')::bigint AS wal"
            )
        )[0]
        cpu = {name: procs.cpu_seconds(pid) or 0.0 for name, pid in self.pids.items()}
        others = procs.cpu_by_command(("postgres", "beam.smp"))
        cpu["postgres (all backends)"] = others["postgres"]
        cpu["rabbitmq (beam.smp)"] = others["beam.smp"]
        cpu["bench (this process)"] = procs.cpu_seconds(_self_pid()) or 0.0
        cpu["machine (all cores, busy)"] = procs.machine_busy_seconds()
        return Snapshot(
            db={"write_transactions": int(row["xid"])},
            wal={"wal_bytes": int(row["wal"])},
            cpu=cpu,
            own_queries=self.own_queries,
            at=time.monotonic(),
            counted=await self._scrape(),
        )

    async def _scrape(self) -> dict[str, float]:
        """Orbit's counters, summed over every process's /metrics and this one's."""
        totals = {name: REGISTRY.get_sample_value(name) or 0.0 for name in _COUNTED}
        async with httpx.AsyncClient(timeout=10) as http:
            for url in self.metrics_urls.values():
                response = await http.get(url)
                response.raise_for_status()
                for family in text_string_to_metric_families(response.text):
                    for sample in family.samples:
                        if sample.name in totals:
                            totals[sample.name] += sample.value
        return totals

    def delta(
        self, before: Snapshot, after: Snapshot, steps: int, seconds: float
    ) -> dict[str, Any]:
        own = after.own_queries - before.own_queries
        db = {k: after.db[k] - before.db[k] for k in after.db}
        wal = {k: after.wal[k] - before.wal[k] for k in after.wal}
        cpu = {k: round(after.cpu[k] - before.cpu.get(k, 0.0), 2) for k in after.cpu}
        machine = cpu.pop("machine (all cores, busy)")
        # What else ran meanwhile (someone's tests, say): the figures are then not clean.
        cpu["other processes"] = round(max(0.0, machine - sum(cpu.values())), 2)
        counted = {k: after.counted.get(k, 0.0) - before.counted.get(k, 0.0) for k in _COUNTED}
        per_step = {
            "pg_write_transactions": _ratio(db["write_transactions"], steps),
            "pg_statements": _ratio(counted["orbit_postgres_statements_total"], steps),
            "amqp_messages": _ratio(counted["orbit_amqp_messages_published_total"], steps),
            "wal_bytes": _ratio(wal["wal_bytes"], steps),
            "cpu_ms_total": _ratio((sum(cpu.values()) - cpu["other processes"]) * 1000, steps),
        }
        return {
            "interval_s": round(after.at - before.at, 2),
            "interval_is": "snapshot to snapshot: the workload plus about 2 s of idle and checks",
            "bench_own_queries": own,
            "bench_own_queries_are": "read-only: they take no transaction id",
            "postgres_cluster": {**db, **wal},
            "cpu_seconds": cpu,
            "orbit_counters": {k: round(v) for k, v in counted.items()},
            "orbit_counters_are": "summed over every service, the worker and the bench's client;"
            " statements include BEGIN/COMMIT and the services' background polls",
            "per_step": per_step,
        }


def _self_pid() -> int:
    import os  # noqa: PLC0415

    return os.getpid()


def _ratio(value: float, steps: int) -> float | None:
    return round(value / steps, 3) if steps else None
