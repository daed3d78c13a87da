"""Snapshots: loading executions from their last snapshot and the events after it.

The decider writes a snapshot every ``ORBIT_SNAPSHOT_EVERY`` events, in the
append itself (:data:`.sql.history.APPEND`, ``snapshots_written``; the values in
:mod:`.appends`). :meth:`SnapshotStore.read` is the other half: one query
gives, for each execution, its snapshot (if it has a usable one newer than
what the reader holds) and the events after the snapshot. A snapshot that
does not decode is dropped from the answer and that execution read again
from where the reader was: never a failure (:mod:`orbit_model.snapshots`).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass, field

from orbit_model.events import Event
from orbit_model.snapshots import SNAPSHOT_VERSION, decode_snapshot
from orbit_model.state import ExecutionState
from orbit_services.store import sql
from orbit_services.store.history import UndecodedEvent, decoded
from orbit_services.store.pool import Database

log = logging.getLogger("orbit.store")


@dataclass
class Loaded:
    """What :meth:`SnapshotStore.read` found.

    Attributes:
        snapshots: For the executions loaded from a snapshot, its state.
        events: For every execution, the events after its snapshot (or after the
            seq the reader gave, without one), in order.
    """

    snapshots: dict[str, ExecutionState] = field(default_factory=dict)
    events: dict[str, list[Event | UndecodedEvent]] = field(default_factory=dict)


class SnapshotStore:
    """The ``snapshots`` table (``EventStore.snapshots``)."""

    def __init__(self, database: Database) -> None:
        self._db = database

    async def read(self, after: Mapping[str, int]) -> Loaded:
        """For each execution, its last usable snapshot newer than the seq given for it,
        and the events after that (one query for all of them)."""
        loaded = Loaded(events={execution_id: [] for execution_id in after})
        if not after:
            return loaded
        rows = await self._db.fetch(
            sql.history.READ_FROM_SNAPSHOTS,
            execution_ids=list(after),
            after_seqs=list(after.values()),
            version=SNAPSHOT_VERSION,
        )
        unusable: dict[str, int] = {}
        for row in rows:
            execution_id = row["execution_id"]
            if execution_id in unusable:
                continue
            if row["snapshot"]:
                state = decode_snapshot(row["data"], row["seq"])
                if state is None:
                    log.warning(
                        "the snapshot at seq %s does not decode: replaying the history",
                        row["seq"],
                        extra={"action": "snapshot.unusable", "execution_id": execution_id},
                    )
                    unusable[execution_id] = after[execution_id]
                    continue
                loaded.snapshots[execution_id] = state
                continue
            event = decoded(row["seq"], row["recorded_at"], row["type"], row["data"])
            loaded.events[execution_id].append(event)
        if unusable:
            rows = await self._db.fetch(
                sql.history.READ_EVENTS_MANY,
                execution_ids=list(unusable),
                after_seqs=list(unusable.values()),
            )
            for execution_id in unusable:
                loaded.events[execution_id] = []
            for row in rows:
                event = decoded(row["seq"], row["recorded_at"], row["type"], row["data"])
                loaded.events[row["execution_id"]].append(event)
        return loaded

    async def of(self, execution_id: str) -> tuple[int, str] | None:
        """The seq and version of an execution's snapshot, if it has one (for tests and
        operators)."""
        row = await self._db.fetchrow(sql.history.SNAPSHOT_OF, execution_id=execution_id)
        return None if row is None else (int(row["seq"]), str(row["version"]))
