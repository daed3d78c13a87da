"""What the gateway's start rules and the decider's turn need of the store.

:class:`Store` is the part of :class:`~.event_store.EventStore` that
:class:`~orbit_services.gateway.api.starts.Starts` (through its group commit and
definitions registry) and :class:`~orbit_services.decider.deciding.Deciding`
(through its state cache) call, so that their rules can run over another store
honouring the same contract: ``tests/fakes/memory_store.py`` keeps it in plain
Python, and ``tests/integration/test_store_contract.py`` holds both stores to
the same cases. The one rule of concurrency is the history's: an append whose
``expected_seq`` is not the execution's last seq, or that creates an execution
that exists, raises :class:`~.rows.AppendConflict` and writes nothing of its batch.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from typing import Protocol

from orbit_model.compiler import Definition
from orbit_model.repeated_starts import RecordedStart
from orbit_services.store.rows import Append, ExecutionRow
from orbit_services.store.snapshots import Loaded


class SnapshotReads(Protocol):
    async def read(self, after: Mapping[str, int]) -> Loaded:
        """For each execution, its last usable snapshot newer than the seq given for it
        (a store may keep none), and the events after that or after the seq."""
        ...


class TimerReads(Protocol):
    async def of(self, execution_id: str) -> dict[str, int]:
        """The timers held for an execution, by key: their due times, epoch ms."""
        ...


class HeartbeatReads(Protocol):
    async def heartbeats(self, tokens: Collection[str]) -> dict[str, int]:
        """When the task of each delivery an open session holds last heartbeated."""
        ...


class Store(Protocol):
    """Histories, executions and definitions, as the start rules and the decider see them."""

    @property
    def snapshots(self) -> SnapshotReads: ...

    @property
    def timers(self) -> TimerReads: ...

    @property
    def sessions(self) -> HeartbeatReads: ...

    async def append(self, appends: Sequence[Append]) -> list[int]:
        """Write every append or none; the ids of the outbox rows written, in order.

        Raises:
            AppendConflict: An execution's last seq is not the append's ``expected_seq``
                (or, for a new one, it exists). Nothing was written.
        """
        ...

    async def execution(self, execution_id: str) -> ExecutionRow | None: ...

    async def recorded_starts(self, execution_ids: Sequence[str]) -> dict[str, RecordedStart]:
        """How each of these executions that exists was started."""
        ...

    async def count_running(self) -> int: ...

    async def register_definition(self, definition: Definition, source: str | None = None) -> bool:
        """True if new, False if this very one was there.

        Raises:
            OrbitError: ``DEFINITION_CONFLICT`` when its name and version hold another one.
        """
        ...

    async def definition(self, name: str, version: str) -> Definition | None: ...

    async def definition_by_hash(self, definition_hash: str) -> Definition | None: ...

    async def definition_versions(self, name: str) -> list[str]: ...
