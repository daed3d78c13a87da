"""What the gateway offers: register definitions, start, signal, cancel and read executions.

The HTTP API and the AMQP command intake both call :class:`Executions`. Every
method returns JSON-ready data (plain dicts, lists, strings; an execution as the
models of :mod:`orbit_model.views`) or raises an
:class:`~orbit_model.errors.OrbitError` whose code, HTTP status and message
the client sees.

A write appends its event with the seq it read last and, in the same
transaction, an outbox ``Wake`` for the decider's partition of the execution;
the relay publishes it once committed. If the decider appended first, the
write folds in the new events, checks again and retries.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Sequence
from datetime import UTC, datetime, timedelta

from orbit_model.access import UNRESTRICTED, Grant, TokenScope, like_pattern
from orbit_model.children import children_of
from orbit_model.cursors import decode_cursor, encode_cursor
from orbit_model.errors import ErrorCode, OrbitError
from orbit_model.events import Event
from orbit_model.inputs import accept_cancel, accept_signal, signal_seq
from orbit_model.ir import WorkflowIR
from orbit_model.json_value import Json
from orbit_model.messages import (
    CancelExecution,
    Command,
    SignalExecution,
    StartExecution,
    Wake,
)
from orbit_model.payloads import check_payload
from orbit_model.queries import answer_query
from orbit_model.signal_takers import signal_takers
from orbit_model.state import TERMINAL, ExecutionState, evolve
from orbit_model.topology import Topology
from orbit_model.trace_ids import trace_id
from orbit_model.views import ExecutionPage, ExecutionView, HistoryView, history_view, needs_workers
from orbit_model.workers import Workers, WorkerSession, worker_view
from orbit_sdk.clock import epoch_ms
from orbit_services.gateway.api.definitions import DefinitionRegistry, is_json
from orbit_services.gateway.api.endings import Endings
from orbit_services.gateway.api.starts import Starts
from orbit_services.gateway.api.views import summary
from orbit_services.runtime.settings import Settings
from orbit_services.store import (
    Append,
    AppendConflict,
    EventStore,
    ExecutionRow,
    GroupCommit,
    HistoryUnreadable,
    OutboxMessage,
    OutboxRelay,
    StateCache,
)
from orbit_services.store.listen import Listener

STATUSES = ("running", "completed", "failed", "cancelled", "timed_out")
"""The statuses clients see and filter by."""
MAX_PAGE = 1000
STATE_CACHE_SIZE = 10_000
"""Executions whose state one gateway keeps, least recently used dropped first."""

_APPEND_ATTEMPTS = 10
_FIRST_POLL = 0.02
_LAST_POLL = 0.25
"""How waits poll while no LISTEN connection tells them of endings."""
Accept = Callable[[ExecutionState, WorkflowIR], list[Event]]


class Executions:
    """The gateway's operations over one store, relay and topology."""

    def __init__(
        self, store: EventStore, relay: OutboxRelay, topology: Topology, settings: Settings
    ) -> None:
        self.store = store
        self.relay = relay
        self.topology = topology
        self.settings = settings
        self.registry = DefinitionRegistry(store)
        self._max_payload = settings.max_payload_bytes
        self._max_depth = settings.max_payload_depth
        self._states = StateCache(store, STATE_CACHE_SIZE)
        """What signals, cancels, views and queries read: only new events are read."""
        self._commits = GroupCommit(store)
        """Starts, signals and cancels that arrive together share a transaction."""
        self.starts = Starts(
            store, relay, self._commits, self.registry, settings, check=self._check, wake=self._wake
        )
        """Starts, one or a batch at a time."""
        self.endings = Endings()
        """The waits of ``?wait=``, woken as their executions end."""
        self._endings_listener: Listener | None = None

    async def listen_for_endings(self) -> None:
        """Have waits woken by the store's notifications rather than poll.

        Raises:
            OrbitError: ``UNAVAILABLE`` if Postgres cannot be reached.
        """
        self._endings_listener = await self.store.listen_for_endings(
            self.endings.ended, self.endings.wake_all
        )

    async def close(self) -> None:
        """Let the appends in hand be written; stop listening."""
        await self._commits.close()
        if self._endings_listener is not None:
            await self._endings_listener.close()
            self._endings_listener = None

    # -- definitions -----------------------------------------------------------

    async def register(
        self, body: bytes, content_type: str | None, grant: Grant = UNRESTRICTED
    ) -> dict[str, Json]:
        """Register a definition: ``{name, version, hash, created}``.

        The body is compiled IR if ``content_type`` is JSON, YAML otherwise.
        ``created`` is False when this very definition was registered before.
        ``grant``: what the caller may do (its workflow patterns are checked once
        the definition's name is known).

        Raises:
            OrbitError: ``INVALID_DEFINITION`` (a :class:`~orbit_model.problems.DefinitionError`),
                ``CHILD_NOT_REGISTERED``, ``DEFINITION_CONFLICT`` or ``PERMISSION_DENIED``.
        """
        if len(body) > self.settings.max_definition_bytes:
            raise OrbitError(
                ErrorCode.PAYLOAD_TOO_LARGE,
                f"the definition is {len(body)} bytes; the limit is"
                f" {self.settings.max_definition_bytes} (ORBIT_MAX_DEFINITION_BYTES)",
            )
        is_ir = is_json(content_type)
        parsed = await self.registry.compile(body, is_ir=is_ir)
        grant.require(TokenScope.DEFINITIONS_WRITE, parsed.ir.name)
        # A narrowed token would otherwise reach other workflows by starting them as
        # children: the children must be its workflows too.
        for child, _ in children_of(parsed):
            grant.require(TokenScope.DEFINITIONS_WRITE, child)
        source = None if is_ir else body.decode("utf-8")  # UTF-8: definition_from_body saw to it
        definition, created = await self.registry.register(parsed, source)
        ir = definition.ir
        return {"name": ir.name, "version": ir.version, "hash": definition.hash, "created": created}

    async def definitions(self) -> list[dict[str, Json]]:
        """Every registered definition: ``[{name, version, hash, registered_at}]``."""
        return [
            {
                "name": row.name,
                "version": row.version,
                "hash": row.hash,
                "registered_at": row.registered_at.isoformat(),
            }
            for row in await self.store.list_definitions()
        ]

    async def definition_ir(self, name: str, version: str) -> dict[str, Json]:
        """The stored IR of ``name@version`` (children pinned by hash).

        Raises:
            OrbitError: ``WORKFLOW_NOT_FOUND``.
        """
        definition = await self.registry.get(name, version)
        if definition is None:
            raise OrbitError(
                ErrorCode.WORKFLOW_NOT_FOUND, f"workflow {name}@{version} is not registered"
            )
        return definition.ir.to_json_data()

    # -- writes ----------------------------------------------------------------

    async def start(self, command: StartExecution) -> dict[str, Json]:
        """Start an execution: ``{execution_id, created}`` (:meth:`.Starts.start`)."""
        return await self.starts.start(command)

    async def start_batch(
        self, commands: Sequence[StartExecution], grant: Grant = UNRESTRICTED
    ) -> list[dict[str, Json]]:
        """Start many: a result per command, in order (:meth:`.Starts.start_batch`)."""
        return await self.starts.start_batch(commands, grant)

    async def signal(
        self, execution_id: str, name: str, payload: Json = None, request_id: str | None = None
    ) -> dict[str, Json]:
        """Record a signal for the execution's ``await`` steps: ``{seq, taken, steps}``, the
        seq of its event (the first one's, for a ``request_id`` recorded before) and which
        ``await`` step takes it (:mod:`orbit_model.signal_takers`).

        Raises:
            OrbitError: ``NOT_FOUND``, ``INVALID_REQUEST``, ``PAYLOAD_TOO_LARGE``,
                ``UNKNOWN_SIGNAL``, ``SIGNAL_PAYLOAD_INVALID``, ``EXECUTION_FINISHED``
                or ``HISTORY_UNREADABLE``.
        """
        self._check(f"the payload of signal {name!r}", payload)
        before, after = await self._apply(
            execution_id, lambda state, ir: accept_signal(state, ir, name, payload, request_id)
        )
        recorded = None if request_id is None else signal_seq(after, request_id)
        seq = before.last_seq + 1 if recorded is None else recorded
        definition = await self.registry.by_hash(after.definition_hash)
        takers = signal_takers(after, definition.ir, seq)
        return {"seq": seq, "taken": takers.taken, "steps": list(takers.steps)}

    async def cancel(self, execution_id: str, reason: str = "") -> ExecutionView:
        """Ask the execution to stop (compensation and cleanup still run); its view.

        A second request while it stops adds nothing.

        Raises:
            OrbitError: ``NOT_FOUND``, ``INVALID_REQUEST`` for a reason that cannot be
                stored (a NUL character), ``PAYLOAD_TOO_LARGE``, ``EXECUTION_FINISHED``
                once it has ended, or ``HISTORY_UNREADABLE``.
        """
        await self._cancel(execution_id, reason)
        return await self.view(execution_id)

    async def _cancel(self, execution_id: str, reason: str) -> None:
        self._check("the cancel reason", reason)
        await self._apply(execution_id, lambda state, _: accept_cancel(state, reason))

    async def handle(self, command: Command, message_id: str | None = None) -> Json:
        """Carry out an AMQP command (its AMQP ``message_id`` identifies a signal without
        a ``request_id``); the ``result`` of its :class:`CommandReply`."""
        match command:
            case StartExecution():
                return await self.start(command)
            case SignalExecution():
                signal = command.identified(message_id)
                args = (signal.execution_id, signal.name, signal.payload, signal.request_id)
                return await self.signal(*args)
            case CancelExecution():
                await self._cancel(command.execution_id, command.reason)
                return {}
        raise TypeError(f"not a command: {command!r}")  # pragma: no cover - the union is closed

    # -- reads -----------------------------------------------------------------

    async def view(self, execution_id: str) -> ExecutionView:
        """The execution and each step's status, attempt, output, error, kind and wait.

        ``waiting_for`` says what a step waits for (null if nothing); the
        execution's own ``waiting_for`` lists the reasons of its steps.

        Raises:
            OrbitError: ``NOT_FOUND``.
        """
        return await self._view(await self._row(execution_id))

    async def wait(self, execution_id: str, seconds: float) -> ExecutionView:
        """The view once the execution has ended, or after ``seconds`` (at most
        ``ORBIT_MAX_WAIT_SECONDS``).

        Woken by the store's notification of its ending (:mod:`.endings`) once
        :meth:`listen_for_endings` has run; polls while there is no listener.

        Raises:
            OrbitError: ``NOT_FOUND``.
        """
        loop = asyncio.get_running_loop()
        deadline = loop.time() + min(max(seconds, 0.0), self.settings.max_wait_seconds)
        delay = _FIRST_POLL
        with self.endings.watch(execution_id) as ended:
            while True:
                ended.clear()  # before the read: an ending committed after it sets it again
                row = await self._row(execution_id)
                remaining = deadline - loop.time()
                if row.status in TERMINAL or remaining <= 0:
                    return await self._view(row)
                if self._endings_listener is not None and self._endings_listener.listening:
                    pause = remaining
                else:
                    pause = min(delay, remaining)
                    delay = min(delay * 2, _LAST_POLL)
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(pause):
                        await ended.wait()

    async def history(self, execution_id: str) -> list[dict[str, Json]]:
        """Every event: ``[{seq, recorded_at, type, data}]``; one that no longer decodes
        has empty ``data``, its stored JSON in ``raw`` and why in ``error``.

        Raises:
            OrbitError: ``NOT_FOUND``.
        """
        stored = await self.store.read_history(execution_id)
        if not stored:
            raise not_found(execution_id)
        return [item.to_json_data() for item in stored]

    async def query(self, execution_id: str, name: str) -> dict[str, Json]:
        """A declared query's value now: ``{value}``; unfinished steps read as null.

        It reads what is stored with the decisions of the execution's next turn
        applied (:func:`orbit_model.queries.projected`), so a query answered after a
        signal's acknowledgement reflects that signal, whichever gateway answers.

        Raises:
            OrbitError: ``NOT_FOUND``, ``UNKNOWN_QUERY``, ``QUERY_FAILED``,
                ``EXPRESSION_LIMIT`` (past its budget, or a value larger than
                ``ORBIT_MAX_PAYLOAD_BYTES``) or ``HISTORY_UNREADABLE``.
        """
        state = await self._state(execution_id)
        definition = await self.registry.by_hash(state.definition_hash)
        # The decider's turn and the expression are CPU work (an expression may spend
        # its whole budget): on a thread, the event loop serves others meanwhile.
        value = await asyncio.to_thread(
            answer_query,
            state,
            definition.ir,
            name,
            now=epoch_ms(),
            policy=self.settings.policy,
            max_bytes=self._max_payload,
            max_depth=self._max_depth,
        )
        return {"value": value}

    async def workflow_of(self, execution_id: str) -> str | None:
        """The workflow the execution runs; None when there is no such execution."""
        row = await self.store.execution(execution_id)
        return None if row is None else row.workflow

    async def workers(self) -> list[dict[str, Json]]:
        """Workers seen in the last hour: ``[{worker_id, runtime, sdk, contracts, online, …}]``.

        A worker is online while one of its sessions is open and was seen
        within ``session_timeout_ms``; ``sessions`` and ``inflight`` count those.
        """
        by_worker: dict[str, list[WorkerSession]] = {}
        for session in await self.store.sessions.sessions():
            by_worker.setdefault(session.worker_id, []).append(session)
        timeout = timedelta(milliseconds=self.settings.session_timeout_ms)
        now = datetime.now(UTC)
        return [
            worker_view(worker_id, sessions, now - timeout)
            for worker_id, sessions in sorted(by_worker.items())
        ]

    # -- internals -------------------------------------------------------------

    def _check(self, what: str, value: Json) -> None:
        check_payload(what, value, self._max_payload, self._max_depth)

    async def _apply(
        self, execution_id: str, accept: Accept
    ) -> tuple[ExecutionState, ExecutionState]:
        """Append what ``accept`` makes of the state, re-reading on a conflict.

        Returns:
            The state the events were accepted on, and the state after them.

        Raises:
            HistoryUnreadable: Its history no longer decodes (once the decider is told).
        """
        try:
            state = await self._state(execution_id)
        except HistoryUnreadable as error:
            if not error.ended:  # only the decider ends it: make sure it looks now
                await self.relay.publish_committed([], [self._wake(execution_id)])
            raise
        for _ in range(_APPEND_ATTEMPTS):
            definition = await self.registry.by_hash(state.definition_hash)
            events = accept(state, definition.ir)
            if not events:
                return state, state
            after = state
            for event in events:
                after = evolve(after, event)
            wake = self._wake(execution_id)
            append = Append(
                execution_id,
                state.last_seq,
                events,
                after,
                timers_before=state.timers,
                outbox=[wake],
            )
            try:
                ids = await self._commits.append(append)
            except AppendConflict:
                state = await self._state(execution_id)
                continue
            self._states.put(execution_id, after)
            await self.relay.publish_committed(ids, [wake])
            return state, after
        raise OrbitError(
            ErrorCode.UNAVAILABLE,
            f"execution {execution_id} kept changing while this was recorded; try again",
        )

    async def _state(self, execution_id: str) -> ExecutionState:
        """The execution's state now (its cached state and the events since)."""
        state = (await self._states.current([execution_id]))[execution_id]
        if state.last_seq == 0:
            raise not_found(execution_id)
        return state

    async def _row(self, execution_id: str) -> ExecutionRow:
        row = await self.store.execution(execution_id)
        if row is None:
            raise not_found(execution_id)
        return row

    async def _view(self, row: ExecutionRow) -> ExecutionView:
        shown: HistoryView
        try:
            state = await self._state(row.execution_id)
        except HistoryUnreadable as error:
            # A read changes nothing: the decider ends the execution at its next input
            # (a signal or a cancel, refused, wakes it). Its row (status, error) is all
            # that can be told: no step without the history.
            state, shown = error.before, HistoryView(steps={}, waiting_for=[], lost_messages=[])
        else:
            definition = await self.registry.by_hash(row.definition_hash)
            workers = None
            if needs_workers(state):  # one read of the sessions for every step of the view
                timeout = timedelta(milliseconds=self.settings.session_timeout_ms)
                sessions = await self.store.sessions.sessions()
                workers = Workers.of(sessions, datetime.now(UTC) - timeout)
            shown = history_view(state, definition.ir, workers)
        return ExecutionView(
            **dict(summary(row)),
            input=row.input,
            output=row.output,
            error=row.error,
            **dict(shown),
            # Its trace (orbit_model.trace_ids): a child's is its root execution's.
            trace_id=f"{trace_id(state.trace_root or row.execution_id):032x}",
        )

    def _wake(self, execution_id: str) -> OutboxMessage:
        return OutboxMessage.to(
            self.topology.decider_route(execution_id), Wake(execution_id=execution_id)
        )

    # Last in the class: past this line ``list`` names this method, not the builtin.
    async def list(
        self,
        status: str | None = None,
        workflow: str | None = None,
        limit: int = 50,
        cursor: str | None = None,
        grant: Grant = UNRESTRICTED,
    ) -> ExecutionPage:
        """Executions newest first: ``{items, next_cursor}``; pass ``next_cursor`` for more.

        A ``grant`` narrowed to some workflows lists only theirs.

        Raises:
            OrbitError: ``INVALID_REQUEST`` for an unknown status, a limit outside
                1..1000 or a cursor this API did not hand out.
        """
        if status is not None and status not in STATUSES:
            raise OrbitError(
                ErrorCode.INVALID_REQUEST,
                f"unknown status {status!r}; one of: {', '.join(STATUSES)}",
            )
        if not 1 <= limit <= MAX_PAGE:
            raise OrbitError(ErrorCode.INVALID_REQUEST, f"limit must be within 1..{MAX_PAGE}")
        before = None if cursor is None else decode_cursor(cursor)
        if workflow is not None:
            grant.require(TokenScope.EXECUTIONS_READ, workflow)
        like_any = None if grant.everything else [like_pattern(p) for p in grant.workflows]
        rows = await self.store.list_executions(status, workflow, before, limit + 1, like_any)
        page = rows[:limit]
        more = len(rows) > limit
        return ExecutionPage(
            items=[summary(row) for row in page],
            next_cursor=encode_cursor(page[-1].position) if more else None,
        )


def not_found(execution_id: str) -> OrbitError:
    return OrbitError(ErrorCode.NOT_FOUND, f"execution {execution_id!r} not found")
