"""Counted cost: Postgres write transactions and WAL, and the CPU of every process, as deltas.

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

from bench import procs

_STAT_FLUSH_WAIT = 1.5  # backends report their counters at most once a second


@dataclass
class Snapshot:
    db: dict[str, int]
    wal: dict[str, int]
    cpu: dict[str, float]
    own_queries: int
    at: float


@dataclass
class Counters:
    """Reads the counters through one connection; ``own_queries`` counts the bench's polls."""

    conn: asyncpg.Connection
    database: str
    pids: dict[str, int]
    own_queries: int = 0
    statements_note: str = ""
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
        )

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
        per_step = {
            "pg_write_transactions": _ratio(db["write_transactions"], steps),
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
            "per_step": per_step,
            "pg_statements": self.statements_note,
            "rabbitmq_messages": "not counted: needs the management plugin's message "
            "statistics (passive queue declares give only the ready count)",
        }


def _self_pid() -> int:
    import os  # noqa: PLC0415

    return os.getpid()


def _ratio(value: float, steps: int) -> float | None:
    return round(value / steps, 3) if steps else None


async def statements_available(conn: asyncpg.Connection) -> str:
    preload = await conn.fetchval("SHOW shared_preload_libraries")
    if "pg_stat_statements" in (preload or ""):
        return "pg_stat_statements is loaded but not used by this version of the bench"
    return (
        "not counted: pg_stat_statements is not in shared_preload_libraries on this server"
        " (it needs a restart of Postgres); write transactions and WAL bytes are counted instead"
    )
