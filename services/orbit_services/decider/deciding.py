"""The decider's work: inputs in, events and messages out, committed together.

:meth:`Deciding.handle` takes a batch of inputs for many executions (wake-ups,
task results, timer firings, lost deliveries, child starts and cancels),
brings each execution's state up to date (the state cache plus one query for
the events appended since), gathers what the pure core needs to know from
I/O (definitions, who holds a delivery), lets :func:`orbit_model.plan.plan`
decide each execution's turn, and appends everything in one statement with
the messages the new events call for in the outbox. If another writer got
there first the whole batch is re-read and decided again: the pure core
makes that safe.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

from orbit_model.broker_roles import Sender
from orbit_model.errors import ErrorCode, OrbitError
from orbit_model.ir import WorkflowIR
from orbit_model.messages import (
    DeciderInput,
    DeliveryLost,
    Outgoing,
    StartChild,
    TaskAssignment,
    TaskResult,
    Wake,
)
from orbit_model.plan import Facts, Plan, liveness_key, plan
from orbit_model.snapshots import snapshot_due
from orbit_model.state import ExecutionState
from orbit_model.topology import Topology
from orbit_model.unreadable import fail_unreadable
from orbit_sdk.clock import epoch_ms
from orbit_services.decider.spans import SpanRecorder
from orbit_services.decider.step_clock import StepClock
from orbit_services.runtime import metrics
from orbit_services.runtime.broker import TaskQueues
from orbit_services.runtime.senders import SenderBook
from orbit_services.runtime.settings import Settings
from orbit_services.store import (
    Append,
    AppendConflict,
    HistoryUnreadable,
    OutboxMessage,
    StateCache,
    Store,
)

log = logging.getLogger("orbit.decider")

_MAX_CONFLICT_RETRIES = 5


@dataclass(frozen=True)
class Committed:
    """What a batch wrote: its outbox rows, for the relay to publish now."""

    outbox_ids: list[int]
    messages: list[OutboxMessage]
    events: int


@dataclass(frozen=True)
class _Turn:
    """One execution's part of a batch: the plan, the append it becomes, its definition."""

    plan: Plan
    append: Append
    definition: WorkflowIR | None
    unreadable: HistoryUnreadable | None = None
    """Why the turn fails the execution, when its history no longer decodes."""


_Refused = dict[str, list[tuple[DeciderInput, OrbitError]]]
"""The inputs each execution of a batch refused, and why."""


def _report(refused: _Refused) -> None:
    """Log each input a committed batch refused; count a result from a user that may not
    answer its task as a refused message (docs/security.md)."""
    for execution_id, items in refused.items():
        for item, error in items:
            if error.code is ErrorCode.PERMISSION_DENIED:
                metrics.MESSAGES_REFUSED.labels("decider", item.type, "task_not_covered").inc()
            log.warning(
                "%s refused: %s",
                item.type,
                error,
                extra={"action": "input.refused", "execution_id": execution_id},
            )


def _asked_heartbeats(groups: dict[str, list[DeciderInput]]) -> set[str]:
    """The deliveries whose holder the batch asks after, to read in one query: those of
    the schedule and heartbeat deadlines come due, and of the lost deliveries reported."""
    tokens = set()
    for items in groups.values():
        for item in items:
            if (key := liveness_key(item)) is not None:
                tokens.add(key.subject)
            if isinstance(item, DeliveryLost):
                tokens.add(item.token)
    return tokens


def _outbox_message(outgoing: Outgoing) -> OutboxMessage:
    return OutboxMessage.to(outgoing.route, outgoing.message, outgoing.headers)


class Deciding:
    """Decides batches of inputs; one instance per decider process."""

    def __init__(
        self,
        store: Store,
        topology: Topology,
        settings: Settings,
        clock: Callable[[], int] = epoch_ms,
        cache_size: int = 20_000,
        *,
        spans: SpanRecorder | None = None,
        task_queues: TaskQueues | None = None,
        sender_book: SenderBook | None = None,
    ) -> None:
        self.store = store
        self.topology = topology
        self.clock = clock
        self.policy = settings.policy
        self.states = StateCache(store, cache_size, keep_terminal=False)
        self.snapshot_every = settings.snapshot_every
        """Events between two snapshots of an execution (``ORBIT_SNAPSHOT_EVERY``)."""
        self.step_clock = StepClock()
        """Counts the committed events and times attempts (orbit_services.decider.step_clock)."""
        self.spans = spans
        """Turns the committed events into trace spans, if set."""
        self.task_queues = task_queues
        """Declares a contract's task queue before the first task is committed for it."""
        self.sender_book = sender_book
        """Tells who sent each result, to take it only from who may answer its task."""

    async def handle(
        self, inputs: Sequence[DeciderInput], users: Sequence[str | None] = ()
    ) -> Committed:
        """Decide on ``inputs`` and commit the outcome; retried on conflicts. ``users``:
        the RabbitMQ user that sent each input, where senders are checked.

        Raises:
            AppendConflict: Still losing races after several tries (the caller gives
                the inputs back to the queue).
            OrbitError: ``UNAVAILABLE`` while Postgres or RabbitMQ is away.
        """
        groups: dict[str, list[DeciderInput]] = {}
        speakers: dict[str, list[Sender | None]] = {}
        book = self.sender_book
        senders = await book.speakers(inputs, users) if book else [None] * len(inputs)
        for item, sender in zip(inputs, senders, strict=True):
            groups.setdefault(item.execution_id, []).append(item)
            speakers.setdefault(item.execution_id, []).append(sender)
        try:
            for _ in range(_MAX_CONFLICT_RETRIES):
                started = time.perf_counter()
                refused: _Refused = {}
                turns = await self._decide(groups, speakers, refused)
                await self._declare_task_queues(turns)
                deciding = time.perf_counter()
                metrics.DECIDER_DECIDE_SECONDS.observe(deciding - started)
                try:
                    ids = await self.store.append([turn.append for turn in turns])
                except AppendConflict:
                    metrics.DECIDER_CONFLICTS.inc()
                    self.states.drop(list(groups))
                    continue
                finally:
                    metrics.DECIDER_COMMIT_SECONDS.observe(time.perf_counter() - deciding)
                metrics.DECIDER_BATCH_INPUTS.observe(len(inputs))
                self._committed(turns, groups)
                _report(refused)
                messages = [message for turn in turns for message in turn.append.outbox]
                return Committed(ids, messages, sum(len(turn.plan.events) for turn in turns))
            raise AppendConflict(list(groups))
        except BaseException:
            # Whatever went wrong may come from a stale cached state: read them afresh.
            self.states.drop(list(groups))
            raise

    async def _decide(
        self,
        groups: dict[str, list[DeciderInput]],
        speakers: dict[str, list[Sender | None]],
        refused: _Refused,
    ) -> list[_Turn]:
        """Every execution's turn, on states brought up to date as needed; ``refused``
        gets the inputs each execution refused, in its last decision."""
        # A cached state is trusted unless an input says the history grew (a Wake):
        # deciding on a stale one either appends events, and loses to the newer
        # events on the unique key (the batch is then re-read and decided again),
        # or appends none, and is then re-read and decided again here.
        trusted = {
            execution_id
            for execution_id, items in groups.items()
            if not any(isinstance(item, Wake) for item in items)
            and self.states.get(execution_id) is not None
        }
        states, unreadable = await self.states.current_or_unreadable(list(groups), trusted)
        beats = await self.store.sessions.heartbeats(_asked_heartbeats(groups))
        now = self.clock()
        turns: list[_Turn] = []
        unsure: list[str] = []
        for execution_id, items in groups.items():
            if execution_id in unreadable:
                turn = await self._unreadable_turn(unreadable[execution_id])
            else:
                turn = await self._turn(
                    states[execution_id], items, now, speakers[execution_id], refused, beats=beats
                )
            if execution_id in trusted and (turn is None or not turn.plan.events):
                # Appending no event, it would not lose on the key if stale.
                unsure.append(execution_id)
            elif turn is not None:
                turns.append(turn)
        if unsure:
            fresh, unreadable = await self.states.current_or_unreadable(unsure)
            for execution_id in unsure:
                if execution_id in unreadable:
                    turn = await self._unreadable_turn(unreadable[execution_id])
                else:
                    items = groups[execution_id]
                    turn = await self._turn(
                        fresh[execution_id],
                        items,
                        now,
                        speakers[execution_id],
                        refused,
                        beats=beats,
                    )
                if turn is not None:
                    turns.append(turn)
        return turns

    async def _turn(
        self,
        state: ExecutionState,
        items: list[DeciderInput],
        now: int,
        senders: list[Sender | None],
        refused: _Refused,
        *,
        beats: dict[str, int],
    ) -> _Turn | None:
        """One execution's plan, from the facts I/O must tell it, as an append (what it
        refused put in ``refused``, told once the batch commits)."""
        facts = replace(await self._facts(state, items, beats), senders=senders)
        decided = plan(state, items, facts, now=now, policy=self.policy, topology=self.topology)
        execution_id = items[0].execution_id
        if decided is None:
            self._dropped(state, execution_id)
            return None
        refused[execution_id] = decided.refused
        if not decided.writes:
            return None
        append = Append(
            execution_id,
            decided.before.last_seq,
            decided.events,
            decided.state,
            timers_before=decided.timers_before,
            outbox=[_outbox_message(outgoing) for outgoing in decided.messages],
            snapshot=snapshot_due(
                decided.before.last_seq, decided.state.last_seq, self.snapshot_every
            ),
        )
        ir = facts.definition or facts.children.get(decided.state.definition_hash)
        return _Turn(decided, append, ir)

    async def _unreadable_turn(self, unreadable: HistoryUnreadable) -> _Turn | None:
        """The turn that fails an execution whose history no longer decodes; None once
        its history holds its end (its inputs are then dropped: there is nothing to do).

        Appended after the last stored event, without decoding the bad one, so the
        failure never depends on what cannot be read.
        """
        execution_id = unreadable.execution_id
        if unreadable.ended:
            log.debug(
                "input for an ended execution whose history cannot be read dropped",
                extra={"action": "input.history_unreadable", "execution_id": execution_id},
            )
            return None
        before = unreadable.before
        ir = await self._definition(before.definition_hash) if before.definition_hash else None
        failure = unreadable.event.failure()
        end = fail_unreadable(before, execution_id, failure, ir, self.topology)
        append = Append(
            execution_id,
            unreadable.last_seq,
            [end.event],
            end.state,
            # What the table holds, not what ``before`` says: events after the bad one
            # may have set others. A terminal state has none, so all are cleared.
            timers_before=await self.store.timers.of(execution_id),
            outbox=[_outbox_message(outgoing) for outgoing in end.messages],
        )
        decided = Plan(before, end.state, [end.event], end.messages)
        return _Turn(decided, append, ir, unreadable)

    async def _facts(
        self, state: ExecutionState, items: list[DeciderInput], beats: dict[str, int]
    ) -> Facts:
        """What I/O tells an execution's turn; ``beats``: the batch's :func:`_asked_heartbeats`."""
        definition = None
        if state.last_seq > 0:
            definition = await self._definition(state.definition_hash)
        children: dict[str, WorkflowIR] = {}
        parent_ids: list[str] = []
        for item in items:
            if isinstance(item, StartChild) and state.last_seq == 0:
                child = await self._definition(item.definition_hash)
                if child is not None:
                    children[item.definition_hash] = child
                parent_ids.append(item.parent_execution_id)
        # Does the parent still wait for the child it starts? (Read as it is now.) A parent
        # whose history cannot be read is left out, taken to wait: it ends when the child
        # answers it.
        parents = (await self.states.current_or_unreadable(parent_ids))[0] if parent_ids else {}
        # Schedule and heartbeat deadlines are judged on who holds the delivery now.
        heartbeats: dict[str, int | None] = {}
        for item in items:
            if (key := liveness_key(item)) is not None:
                heartbeats[str(key)] = beats.get(key.subject)
        # A report of a lost delivery that an open session still holds (a redelivery
        # took it, or the report is forged) must not dispatch it a second time.
        held = {i.token for i in items if isinstance(i, DeliveryLost) and i.token in beats}
        return Facts(definition, children, heartbeats, parents, frozenset(held))

    def _dropped(self, state: ExecutionState, execution_id: str) -> None:
        if state.last_seq == 0:
            log.warning(
                "input for an unknown execution dropped",
                extra={"action": "input.unknown_execution", "execution_id": execution_id},
            )
        else:
            log.error(
                "execution %s names a definition that is not registered",
                execution_id,
                extra={"action": "input.unknown_definition", "execution_id": execution_id},
            )

    async def _definition(self, definition_hash: str) -> WorkflowIR | None:
        definition = await self.store.definition_by_hash(definition_hash)
        return None if definition is None else definition.ir

    async def _declare_task_queues(self, turns: list[_Turn]) -> None:
        """Make sure every task queue the batch publishes to exists, before it commits:
        a task committed for a queue that does not exist could not be published."""
        if self.task_queues is None:
            return
        contracts = {
            (outgoing.message.task, outgoing.message.task_version)
            for turn in turns
            for outgoing in turn.plan.messages
            if isinstance(outgoing.message, TaskAssignment)
        }
        for task, version in contracts:
            if not self.task_queues.known(task, version):
                await self.task_queues.ensure(task, version)

    def _committed(self, turns: list[_Turn], groups: dict[str, list[DeciderInput]]) -> None:
        """Remember the new states, count what was committed and make its spans.

        No I/O here: the batch is committed, and nothing may fail it any more.
        """
        for turn in turns:
            before, after = turn.plan.before, turn.plan.state
            execution_id = turn.append.execution_id
            self.states.put(execution_id, after)
            if turn.unreadable is not None:
                # Once: later inputs find the failure in its history, and are dropped.
                log.error(
                    "execution %s failed: %s",
                    execution_id,
                    turn.unreadable.event.failure().message,
                    extra={"action": "execution.history_unreadable", "execution_id": execution_id},
                )
            for item in groups[execution_id]:
                if isinstance(item, TaskResult) and item.started_at is not None:
                    unit = before.unit_of_token(item.token)
                    if unit is not None:
                        self.step_clock.task_started(
                            execution_id, unit, item.token, item.started_at
                        )
            self.step_clock.committed(before, after, turn.plan.events, turn.definition)
            if self.spans is not None:
                self.spans.committed(before, after, turn.plan.events)


__all__ = ["Committed", "Deciding"]
