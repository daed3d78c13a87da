"""Starting executions, one or a batch at a time.

A start writes the execution's first event and row, with an outbox ``Wake``
for its decider, through the gateway's group commit: starts that arrive
together share a transaction, and a batch's starts are appended together.
A start is idempotent by its execution id: the same start again answers
``created: false``; one that differs from the start recorded (workflow, version
or input) is refused with ``EXECUTION_EXISTS`` naming what differs, unless it
asks for the existing execution (``on_conflict: use_existing``;
:mod:`orbit_model.repeated_starts`).
"""

from __future__ import annotations

import asyncio
import secrets
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from orbit_model.access import UNRESTRICTED, Grant, TokenScope
from orbit_model.compiler import Definition
from orbit_model.errors import ErrorCode, OrbitError
from orbit_model.inputs import start_execution
from orbit_model.json_value import Json
from orbit_model.messages import StartExecution
from orbit_model.names import EXECUTION_ID, EXECUTION_ID_RULE
from orbit_model.repeated_starts import RecordedStart, check_repeated_start
from orbit_model.state import NO_EVENTS, evolve
from orbit_services.gateway.api.definitions import DefinitionRegistry
from orbit_services.runtime.settings import Settings
from orbit_services.store import (
    Append,
    AppendConflict,
    GroupCommit,
    OutboxMessage,
    OutboxRelay,
    Store,
)

DELIVERY_SECRET_BYTES = 24
"""Random bytes of an execution's delivery secret (the key of its tokens' MACs)."""
Result = dict[str, Json]


@dataclass(frozen=True)
class _Start:
    """A start checked and made ready to append."""

    index: int
    """Its place in the batch (0 for a single start)."""
    execution_id: str
    given_id: bool
    definition: Definition
    append: Append
    command: StartExecution
    recorded: RecordedStart
    """The start as it is recorded (the input with its defaults)."""

    def check_repeat_of(self, existing: RecordedStart) -> None:
        """Accept this start as a repeat of ``existing``'s, or refuse it.

        Raises:
            OrbitError: ``EXECUTION_EXISTS``, naming what differs.
        """
        check_repeated_start(
            self.execution_id,
            existing,
            self.recorded,
            version_given=self.command.version is not None,
            on_conflict=self.command.on_conflict,
        )


class Starts:
    """The gateway's starts over one store, relay and group commit."""

    def __init__(
        self,
        store: Store,
        relay: OutboxRelay,
        commits: GroupCommit,
        registry: DefinitionRegistry,
        settings: Settings,
        *,
        check: Callable[[str, Json], None],
        wake: Callable[[str], OutboxMessage],
    ) -> None:
        self._store = store
        self._relay = relay
        self._commits = commits
        self._registry = registry
        self._limit = settings.max_active_executions
        self._check = check
        """Refuses a payload past the size and depth limits."""
        self._wake = wake
        """The outbox message that wakes an execution's decider."""

    async def start(self, command: StartExecution) -> Result:
        """Start an execution: ``{execution_id, created}``.

        Idempotent for a given ``execution_id``: the same start again answers
        ``created: false``. Without one, a fresh id is made.

        Raises:
            OrbitError: ``WORKFLOW_NOT_FOUND``, ``INVALID_EXECUTION_ID``,
                ``PAYLOAD_TOO_LARGE``, ``INVALID_INPUT``, ``RESOURCE_EXHAUSTED``, or
                ``EXECUTION_EXISTS`` when the id was started otherwise.
        """
        start = await self._prepared(0, command)
        if self._limit is not None and await self._store.count_running() >= self._limit:
            # A repeated start is answered even when full: it starts nothing.
            if start.given_id:
                existing = await self._existing(start)
                if existing is not None:
                    return existing
            raise _full(self._limit)
        try:
            ids = await self._commits.append(start.append)
        except AppendConflict:
            existing = await self._existing(start)
            if existing is None:  # pragma: no cover - history and row are written together
                raise _exists(start.execution_id) from None
            return existing
        await self._relay.publish_committed(ids, start.append.outbox)
        return _created(start)

    async def start_batch(
        self, commands: Sequence[StartExecution], grant: Grant = UNRESTRICTED
    ) -> list[Result]:
        """Start many executions: a result per command, in their order.

        Each result is ``{execution_id, created}`` as :meth:`start` answers, or
        ``{execution_id, created: false, error: {code, message}}`` for one refused
        (``execution_id`` null if it gave none). Each is idempotent by its id, as
        :meth:`start` is; an id given twice in the batch is started once and
        answered ``created: false`` the second time. The new ones are written
        together (a few transactions of the group commit) and answered once
        committed; with ``ORBIT_MAX_ACTIVE_EXECUTIONS``, those past the room left
        are refused with ``RESOURCE_EXHAUSTED``.
        """
        results: dict[int, Result] = {}
        firsts: dict[str, _Start] = {}
        repeats: list[_Start] = []
        for index, command in enumerate(commands):
            try:
                grant.require(TokenScope.EXECUTIONS_START, command.workflow)
                start = await self._prepared(index, command)
            except OrbitError as error:
                results[index] = _refused(command.execution_id, error)
                continue
            if start.execution_id in firsts:
                repeats.append(start)
            else:
                firsts[start.execution_id] = start
        given = [start.execution_id for start in firsts.values() if start.given_id]
        stored = await self._store.recorded_starts(given) if given else {}
        new = await self._new(list(firsts.values()), stored, results)
        results.update(await self._append_all(new))
        for start in repeats:
            # Held to the start its id has: the stored one, or the batch's first, once made.
            first = firsts[start.execution_id]
            recorded = stored.get(start.execution_id)
            if recorded is None and "error" in results[first.index]:
                results[start.index] = results[first.index]
            else:
                results[start.index] = _repeated(start, recorded or first.recorded)
        return [results[index] for index in sorted(results)]

    async def _new(
        self, starts: list[_Start], stored: dict[str, RecordedStart], results: dict[int, Result]
    ) -> list[_Start]:
        """The starts to append: those whose ids are not ``stored`` yet, within the room
        ``ORBIT_MAX_ACTIVE_EXECUTIONS`` leaves. The others' answers go in ``results``."""
        new = []
        for start in starts:
            existing = stored.get(start.execution_id)
            if existing is None:
                new.append(start)
                continue
            try:
                start.check_repeat_of(existing)
            except OrbitError as error:
                results[start.index] = _refused(start.execution_id, error)
            else:
                results[start.index] = {"execution_id": start.execution_id, "created": False}
        if self._limit is not None and new:
            room = max(0, self._limit - await self._store.count_running())
            for start in new[room:]:
                results[start.index] = _refused(start.execution_id, _full(self._limit))
            new = new[:room]
        return new

    async def _append_all(self, starts: list[_Start]) -> dict[int, Result]:
        """Append the starts together and publish their wakes once committed."""
        outcomes = await asyncio.gather(
            *(self._commits.append(start.append) for start in starts), return_exceptions=True
        )
        results: dict[int, Result] = {}
        committed_ids: list[int] = []
        committed: list[OutboxMessage] = []
        for start, outcome in zip(starts, outcomes, strict=True):
            if isinstance(outcome, list):
                committed_ids.extend(outcome)
                committed.extend(start.append.outbox)
                results[start.index] = _created(start)
            elif isinstance(outcome, AppendConflict):  # started meanwhile, by another request
                try:
                    existing = await self._existing(start)
                except OrbitError as error:
                    existing = _refused(start.execution_id, error)
                results[start.index] = existing or _refused(
                    start.execution_id, _exists(start.execution_id)
                )
            elif isinstance(outcome, OrbitError):
                results[start.index] = _refused(start.execution_id, outcome)
            else:
                raise outcome
        await self._relay.publish_committed(committed_ids, committed)
        return results

    async def _prepared(self, index: int, command: StartExecution) -> _Start:
        """The start's checked id, its definition and its append (a Wake in its outbox).

        Raises:
            OrbitError: ``WORKFLOW_NOT_FOUND``, ``INVALID_EXECUTION_ID``,
                ``PAYLOAD_TOO_LARGE`` or ``INVALID_INPUT``.
        """
        self._check("the workflow", command.workflow)  # before a query names it
        if command.version is not None:
            self._check("the version", command.version)
        definition = await self._registry.resolve(command.workflow, command.version)
        if command.execution_id is None:
            execution_id = str(uuid.uuid4())
        else:
            execution_id = _checked_id(command.execution_id)
        self._check("the execution input", command.input)
        event = start_execution(
            definition.ir,
            definition.hash,
            execution_id,
            command.input,
            delivery_secret=secrets.token_urlsafe(DELIVERY_SECRET_BYTES),
        )
        wake = self._wake(execution_id)
        append = Append(execution_id, 0, [event], evolve(NO_EVENTS, event), outbox=[wake])
        given = command.execution_id is not None
        recorded = RecordedStart(event.workflow, event.version, event.definition_hash, event.input)
        return _Start(index, execution_id, given, definition, append, command, recorded)

    async def _existing(self, start: _Start) -> Result | None:
        """The answer to a repeated start, if the execution exists.

        Raises:
            OrbitError: ``EXECUTION_EXISTS`` when it was started otherwise.
        """
        row = await self._store.execution(start.execution_id)
        if row is None:
            return None
        start.check_repeat_of(
            RecordedStart(row.workflow, row.version, row.definition_hash, row.input)
        )
        return {"execution_id": start.execution_id, "created": False}


def _created(start: _Start) -> Result:
    return {"execution_id": start.execution_id, "created": True}


def _refused(execution_id: str | None, error: OrbitError) -> Result:
    """A batch result for a start that was refused."""
    return {
        "execution_id": execution_id,
        "created": False,
        "error": {"code": str(error.code), "message": error.message},
    }


def _repeated(start: _Start, recorded: RecordedStart) -> Result:
    """A batch result for an id given again in the batch: a repeat of the start its id
    has, or a start that differs."""
    try:
        start.check_repeat_of(recorded)
    except OrbitError as error:
        return _refused(start.execution_id, error)
    return {"execution_id": start.execution_id, "created": False}


def _full(limit: int) -> OrbitError:
    return OrbitError(
        ErrorCode.RESOURCE_EXHAUSTED,
        f"{limit} executions are already running (ORBIT_MAX_ACTIVE_EXECUTIONS)",
    )


def _checked_id(execution_id: str) -> str:
    if not EXECUTION_ID.fullmatch(execution_id):
        raise OrbitError(ErrorCode.INVALID_EXECUTION_ID, EXECUTION_ID_RULE)
    return execution_id


def _exists(execution_id: str) -> OrbitError:
    """An id whose history exists though its row could not be read (never expected)."""
    return OrbitError(ErrorCode.EXECUTION_EXISTS, f"execution {execution_id!r} already exists")
