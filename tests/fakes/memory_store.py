"""The store of the start rules and the decider's turn, in plain Python.

:class:`MemoryStore` keeps what :class:`orbit_services.store.Store` covers in
dictionaries, with the one concurrency rule of the real store: an execution's
events take the seqs after ``expected_seq``, and a seq already taken, or a
new execution whose id exists, fails the whole batch with
:class:`~orbit_services.store.AppendConflict`, writing nothing. Events are kept
as the JSON the real store keeps and decoded on reading, as the real store does.

What it does not do, said here rather than pretended: it keeps no snapshot (a
read replays the events after the seq asked, which the contract allows), no
outbox beyond the ids it hands out, and no SQL. The worker sessions' heartbeats
are what a test sets with :meth:`MemorySessions.hold`.
``tests/integration/test_store_contract.py`` holds it and the Postgres store to
the same cases.
"""

from __future__ import annotations

import json
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime

from orbit_model.compiler import Definition
from orbit_model.errors import ErrorCode, OrbitError
from orbit_model.events import event_to_json
from orbit_model.repeated_starts import RecordedStart
from orbit_model.state import ExecutionState
from orbit_services.store import Append, AppendConflict, ExecutionRow, Store, api_status
from orbit_services.store.history import decoded
from orbit_services.store.snapshots import Loaded


@dataclass(frozen=True)
class _Stored:
    seq: int
    recorded_at: datetime
    type: str
    data: str


class MemorySnapshots:
    """Reads of the histories; no snapshot is ever kept."""

    def __init__(self, history: dict[str, list[_Stored]]) -> None:
        self._history = history

    async def read(self, after: Mapping[str, int]) -> Loaded:
        loaded = Loaded()
        for execution_id, seq in after.items():
            stored = self._history.get(execution_id, [])
            loaded.events[execution_id] = [
                decoded(s.seq, s.recorded_at, s.type, s.data) for s in stored if s.seq > seq
            ]
        return loaded


class MemoryTimers:
    def __init__(self) -> None:
        self.due: dict[str, dict[str, int]] = {}

    async def of(self, execution_id: str) -> dict[str, int]:
        return dict(self.due.get(execution_id, {}))


class MemorySessions:
    def __init__(self) -> None:
        self._held: dict[str, int] = {}

    def hold(self, token: str, heartbeat_at: int) -> None:
        """An open session holds delivery ``token``, whose task heartbeated then."""
        self._held[token] = heartbeat_at

    async def heartbeats(self, tokens: Collection[str]) -> dict[str, int]:
        return {token: self._held[token] for token in tokens if token in self._held}


@dataclass
class MemoryStore:
    """Histories, executions, timers and definitions in dictionaries."""

    history: dict[str, list[_Stored]] = field(default_factory=dict)
    rows: dict[str, ExecutionRow] = field(default_factory=dict)
    timers: MemoryTimers = field(default_factory=MemoryTimers)
    sessions: MemorySessions = field(default_factory=MemorySessions)
    outbox_ids: int = 0
    """The last outbox id handed out."""
    _definitions: dict[tuple[str, str], Definition] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.snapshots = MemorySnapshots(self.history)

    async def append(self, appends: Sequence[Append]) -> list[int]:
        taken = {a.execution_id: len(self.history.get(a.execution_id, [])) for a in appends}
        for append in appends:  # every check first: a conflict writes nothing
            if not append.events:
                continue
            exists = append.execution_id in self.rows or taken[append.execution_id] > 0
            if taken[append.execution_id] > append.expected_seq or (
                append.expected_seq == 0 and exists
            ):
                raise AppendConflict([a.execution_id for a in appends])
            taken[append.execution_id] = append.expected_seq + len(append.events)
        now = datetime.now(UTC)
        for append in sorted(appends, key=lambda a: a.execution_id):
            if append.events:
                self._write(append, now)
        ids = []
        for append in appends:
            for _ in append.outbox:
                self.outbox_ids += 1
                ids.append(self.outbox_ids)
        return ids

    def _write(self, append: Append, now: datetime) -> None:
        stored = self.history.setdefault(append.execution_id, [])
        for offset, event in enumerate(append.events, start=1):
            seq = append.expected_seq + offset
            stored.append(_Stored(seq, now, event.type, event_to_json(event)))
        self._write_row(append, now)
        timers = self.timers.due.setdefault(append.execution_id, {})
        for key in append.timers_before.keys() - append.state.timers.keys():
            timers.pop(key, None)
        timers.update(append.state.timers)

    def _write_row(self, append: Append, now: datetime) -> None:
        state: ExecutionState = append.state
        error = None if state.error is None else json.loads(state.error.model_dump_json())
        before = self.rows.get(append.execution_id)
        closed_at = (before.closed_at if before else None) or now
        self.rows[append.execution_id] = ExecutionRow(
            execution_id=append.execution_id,
            position=before.position if before else len(self.rows) + 1,
            workflow=before.workflow if before else state.workflow,
            version=before.version if before else state.version,
            definition_hash=before.definition_hash if before else state.definition_hash,
            status=api_status(state),
            parent=before.parent if before else state.parent,
            created_at=before.created_at if before else now,
            closed_at=closed_at if state.terminal else None,
            input=before.input if before else state.input,
            output=state.output,
            error=error,
            last_seq=append.expected_seq + len(append.events),
        )

    async def execution(self, execution_id: str) -> ExecutionRow | None:
        return self.rows.get(execution_id)

    async def recorded_starts(self, execution_ids: Sequence[str]) -> dict[str, RecordedStart]:
        return {
            row.execution_id: RecordedStart(
                row.workflow, row.version, row.definition_hash, row.input
            )
            for execution_id in execution_ids
            if (row := self.rows.get(execution_id)) is not None
        }

    async def count_running(self) -> int:
        return sum(1 for row in self.rows.values() if row.status == "running")

    async def register_definition(self, definition: Definition, source: str | None = None) -> bool:
        ir = definition.ir
        existing = self._definitions.get((ir.name, ir.version))
        if existing is None:
            self._definitions[ir.name, ir.version] = definition
            return True
        if existing.hash == definition.hash:
            return False
        raise OrbitError(
            ErrorCode.DEFINITION_CONFLICT,
            f"{ir.name}@{ir.version} is already registered with a different definition"
            f" ({existing.hash}); workflow definitions are immutable, bump the version",
        )

    async def definition(self, name: str, version: str) -> Definition | None:
        return self._definitions.get((name, version))

    async def definition_by_hash(self, definition_hash: str) -> Definition | None:
        found = [d for d in self._definitions.values() if d.hash == definition_hash]
        return found[0] if found else None

    async def definition_versions(self, name: str) -> list[str]:
        return [version for (named, version) in self._definitions if named == name]


def _holds_the_contract(store: MemoryStore) -> Store:
    """Never called: mypy (``make lint``) checks here that the twin is a :class:`Store`."""
    return store
