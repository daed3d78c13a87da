"""Leases on the decider partitions: which decider consumes which partition queue.

Each decider beats in ``deciders`` about once a second and, in the same
transaction, renews the leases it holds and claims free ones up to its share.
A partition is free when no one ever held it, when its holder gave it back,
or when its lease lapsed (its holder died or was cut off from Postgres for
the lease time). The clock is Postgres's ``now()`` throughout, so the
deciders' own clocks never matter.

The share is computed by every decider alike from the deciders heard from
within the lease time, ranked by id: with P partitions and N deciders, the
first ``P mod N`` of them hold ``⌈P/N⌉`` and the others ``⌊P/N⌋``. A decider
holding more than its share gives the extra back itself, after it has
stopped consuming them (:mod:`orbit_services.decider.partitions`); a decider
holding fewer claims free ones. Nothing is ever taken from a live holder.

Why a table and not advisory locks held by a session: a lock lives as long
as its connection, and a decider that froze (or whose network to the
clients went, but not to Postgres) would keep it for ever; a lease lapses by
itself, and its length is a setting (docs/scaling.md).
"""

from __future__ import annotations

import os
import socket
from dataclasses import dataclass
from datetime import datetime

from orbit_model.errors import ErrorCode, OrbitError
from orbit_services.store import sql
from orbit_services.store.pool import Database


def share(partitions: int, live: list[str], decider_id: str) -> int:
    """How many partitions ``decider_id`` should hold among the ``live`` deciders
    (sorted, itself included or not yet seen)."""
    members = sorted({*live, decider_id})
    base, extra = divmod(partitions, len(members))
    return base + (1 if members.index(decider_id) < extra else 0)


@dataclass(frozen=True)
class Beat:
    """What one beat found: the partitions held now, and the share to hold."""

    held: frozenset[int]
    share: int
    live: int
    """Deciders heard from within the lease time, this one included."""


@dataclass(frozen=True)
class DeciderRow:
    decider_id: str
    host: str
    pid: int
    started_at: datetime
    seen_at: datetime
    live: bool


@dataclass(frozen=True)
class PartitionRow:
    partition: int
    owner: str | None
    """The decider whose lease is current; None when free or lapsed."""
    lease_until: datetime | None
    taken_at: datetime | None
    handovers: int


class LeaseStore:
    """The ``deciders`` and ``decider_partitions`` tables (``EventStore.leases``)."""

    def __init__(self, database: Database) -> None:
        self._db = database

    @classmethod
    async def open(cls, url: str, timeout: float) -> LeaseStore:
        """Leases on a pool of their own, each statement (and the wait for a connection)
        bounded by ``timeout``: a beat must end, renewed or failed, before the decider's
        fence deadline, whether Postgres answers or not (a silent link answers nothing
        and raises nothing), and must not wait behind the decider's batches. Postgres
        ends a beat's transaction that waits on this process longer than that, too: a
        beat cut off halfway must not keep the lease rows it locked, or no other decider
        could claim them (its claim skips locked rows) for as long as the cut lasts.

        Raises:
            OrbitError: ``UNAVAILABLE`` when Postgres cannot be reached.
        """
        database = await Database.open(
            url, min_size=1, max_size=2, timeout=timeout, idle_transaction_seconds=timeout
        )
        return cls(database)

    async def close(self) -> None:
        await self._db.close(timeout=5.0)

    async def ensure_partitions(self, partitions: int) -> None:
        """Make the partitions' rows if no decider has yet; refuse another count.

        Raises:
            OrbitError: ``INVALID_SETTINGS`` if the installation has another number
                of partitions than ``partitions``.
        """
        async with self._db.transaction() as transaction:
            await transaction.fetch(sql.leases.LOCK_PARTITIONS)
            await transaction.execute(sql.leases.ENSURE_PARTITIONS, partitions=partitions)
            rows = await transaction.fetch(sql.leases.COUNT_PARTITIONS)
        count = int(rows[0][0])
        if count != partitions:
            raise OrbitError(
                ErrorCode.INVALID_SETTINGS,
                f"this installation has {count} decider partitions, and"
                f" ORBIT_DECIDER_PARTITIONS is {partitions}: set it to {count} on every"
                " service (docs/scaling.md says how to change the count)",
            )

    async def beat(
        self, decider_id: str, partitions: int, lease_seconds: float, *, claim: bool = True
    ) -> Beat:
        """Say this decider is alive, renew its leases, and (if ``claim``) take free
        partitions up to its share; what it holds afterwards."""
        async with self._db.transaction() as transaction:
            await transaction.execute(
                sql.leases.DECIDER_BEAT,
                decider_id=decider_id,
                host=socket.gethostname(),
                pid=os.getpid(),
            )
            live = [
                row["decider_id"]
                for row in await transaction.fetch(
                    sql.leases.LIVE_DECIDERS, lease_seconds=lease_seconds
                )
            ]
            held = {
                row["partition"]
                for row in await transaction.fetch(
                    sql.leases.RENEW_LEASES, decider_id=decider_id, lease_seconds=lease_seconds
                )
            }
            target = share(partitions, live, decider_id)
            if claim and len(held) < target:
                claimed = await transaction.fetch(
                    sql.leases.CLAIM_PARTITIONS,
                    decider_id=decider_id,
                    lease_seconds=lease_seconds,
                    count=target - len(held),
                )
                held.update(row["partition"] for row in claimed)
        return Beat(frozenset(held), target, len({*live, decider_id}))

    async def release(self, decider_id: str, partitions: set[int] | frozenset[int]) -> None:
        """Give ``partitions`` back (the decider has stopped consuming them)."""
        if partitions:
            await self._db.execute(
                sql.leases.RELEASE_PARTITIONS, decider_id=decider_id, partitions=sorted(partitions)
            )

    async def leave(self, decider_id: str) -> None:
        """Give everything back and leave: the others rebalance at their next beat."""
        await self._db.execute(sql.leases.LEAVE_DECIDERS, decider_id=decider_id)

    async def deciders(self, lease_seconds: float) -> list[DeciderRow]:
        """Every decider heard from in the last hour, live or not."""
        rows = await self._db.fetch(sql.leases.LIST_DECIDERS, lease_seconds=lease_seconds)
        return [
            DeciderRow(
                row["decider_id"],
                row["host"],
                row["pid"],
                row["started_at"],
                row["seen_at"],
                row["live"],
            )
            for row in rows
        ]

    async def partitions(self) -> list[PartitionRow]:
        """Every partition, with the decider whose lease on it is current."""
        rows = await self._db.fetch(sql.leases.LIST_PARTITIONS)
        return [
            PartitionRow(
                row["partition"],
                row["owner"] if row["leased"] else None,
                row["lease_until"],
                row["taken_at"],
                row["handovers"],
            )
            for row in rows
        ]


__all__ = ["Beat", "DeciderRow", "LeaseStore", "PartitionRow", "share"]
