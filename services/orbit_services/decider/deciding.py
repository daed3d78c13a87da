"""The decider's work: inputs in, events and messages out, committed together.

:meth:`Deciding.handle` takes a batch of inputs for many executions (wake-ups,
task results, timer firings, lost deliveries, child starts), brings each
execution's state up to date (a bounded cache plus one query for the events
appended since), turns each input into events with :mod:`orbit_model.inputs`,
runs :func:`~orbit_model.decider.decide_until_stable`, and appends everything
in one transaction with the messages the new events call for in the outbox.
If another writer got there first the whole batch is re-read and decided
again: the pure core makes that safe.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from orbit_model.children import child_execution_id
from orbit_model.decider import decide_until_stable, unit_call
from orbit_model.errors import ErrorCode, OrbitError
from orbit_model.events import (
    Event,
    ParentReattached,
    StepCancelled,
    StepDispatched,
    TaskFailure,
)
from orbit_model.inputs import (
    LIVENESS_TIMERS,
    accept_cancel,
    accept_liveness_check,
    accept_lost_delivery,
    accept_result,
    accept_timer,
    start_execution,
)
from orbit_model.ir import HTTP_CONTRACT_VERSION, HTTP_TASK, WorkflowIR
from orbit_model.messages import (
    CancelChild,
    DeciderInput,
    DeliveryLost,
    StartChild,
    TaskAssignment,
    TaskResult,
    TimerDue,
    Wake,
    encode,
)
from orbit_model.payloads import payload_problem
from orbit_model.state import ExecutionState, evolve, replay
from orbit_model.topology import Topology
from orbit_model.trace_ids import traceparent
from orbit_services.decider.spans import SpanRecorder
from orbit_services.decider.step_clock import StepClock
from orbit_services.runtime import metrics
from orbit_services.runtime.broker import TaskQueues
from orbit_services.runtime.clock import epoch_ms
from orbit_services.runtime.settings import Settings
from orbit_services.store import Append, AppendConflict, EventStore, OutboxMessage, StateCache

log = logging.getLogger("orbit.decider")

_MAX_CONFLICT_RETRIES = 5


@dataclass(frozen=True)
class Committed:
    """What a batch wrote: its outbox rows, for the relay to publish now."""

    outbox_ids: list[int]
    messages: list[OutboxMessage]
    events: int


class Deciding:
    """Decides batches of inputs; one instance per decider process."""

    def __init__(
        self,
        store: EventStore,
        topology: Topology,
        settings: Settings,
        clock: Callable[[], int] = epoch_ms,
        cache_size: int = 20_000,
        *,
        spans: SpanRecorder | None = None,
        task_queues: TaskQueues | None = None,
    ) -> None:
        self.store = store
        self.topology = topology
        self.settings = settings
        self.clock = clock
        self.states = StateCache(store, cache_size, keep_terminal=False)
        self.step_clock = StepClock()
        """Counts the committed events and times attempts (orbit_services.decider.step_clock)."""
        self.spans = spans
        """Turns the committed events into trace spans (orbit_model.trace_ids), if set."""
        self.task_queues = task_queues
        """Declares a contract's task queue before the first task is committed for it."""
        self._contracts: set[tuple[str, str]] = set()
        """The contracts the batch being planned dispatches to."""

    async def handle(self, inputs: Sequence[DeciderInput]) -> Committed:
        """Decide on ``inputs`` and commit the outcome; retried on conflicts.

        Raises:
            AppendConflict: Still losing races after several tries (the caller gives
                the inputs back to the queue).
        """
        groups: dict[str, list[DeciderInput]] = {}
        for item in inputs:
            groups.setdefault(item.execution_id, []).append(item)
        try:
            return await self._handle(inputs, groups)
        except BaseException:
            # Whatever went wrong may come from a stale cached state: read them afresh.
            self.states.drop(list(groups))
            raise

    async def _handle(
        self, inputs: Sequence[DeciderInput], groups: dict[str, list[DeciderInput]]
    ) -> Committed:
        for _ in range(_MAX_CONFLICT_RETRIES):
            started = time.perf_counter()
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
            states = await self.states.current(list(groups), trusted)
            now = self.clock()
            appends: list[Append] = []
            self._contracts.clear()
            unsure: list[str] = []
            for execution_id, items in groups.items():
                append = await self._plan(execution_id, states[execution_id], items, now)
                if execution_id in trusted and (append is None or not append.events):
                    # Appending no event, it would not lose on the key if stale.
                    unsure.append(execution_id)
                elif append is not None:
                    appends.append(append)
            if unsure:
                states.update(await self.states.current(unsure))
                for execution_id in unsure:
                    append = await self._plan(
                        execution_id, states[execution_id], groups[execution_id], now
                    )
                    if append is not None:
                        appends.append(append)
            await self._declare_task_queues()
            deciding = time.perf_counter()
            metrics.DECIDER_DECIDE_SECONDS.observe(deciding - started)
            try:
                ids = await self.store.append(appends)
            except AppendConflict:
                metrics.DECIDER_CONFLICTS.inc()
                self.states.drop(list(groups))
                continue
            finally:
                metrics.DECIDER_COMMIT_SECONDS.observe(time.perf_counter() - deciding)
            metrics.DECIDER_BATCH_INPUTS.observe(len(inputs))
            for append in appends:
                self.states.put(append.execution_id, append.state)
                before = states[append.execution_id]
                for item in groups[append.execution_id]:
                    if isinstance(item, TaskResult) and item.started_at is not None:
                        unit = before.unit_of_token(item.token)
                        if unit is not None:
                            self.step_clock.task_started(
                                item.execution_id, unit, item.token, item.started_at
                            )
                self.step_clock.committed(
                    states[append.execution_id],
                    append.state,
                    append.events,
                    await self._definition(append.state.definition_hash),
                )
                if self.spans is not None:
                    self.spans.committed(states[append.execution_id], append.state, append.events)
            messages = [message for append in appends for message in append.outbox]
            return Committed(ids, messages, sum(len(a.events) for a in appends))
        raise AppendConflict(list(groups))

    async def _declare_task_queues(self) -> None:
        """Make sure every task queue the batch publishes to exists, before it commits:
        a task committed for a queue that does not exist could not be published."""
        if self.task_queues is None:
            return
        for task, version in self._contracts:
            if not self.task_queues.known(task, version):
                await self.task_queues.ensure(task, version)

    async def _definition(self, definition_hash: str) -> WorkflowIR | None:
        definition = await self.store.definition_by_hash(definition_hash)
        return None if definition is None else definition.ir

    # -- deciding ----------------------------------------------------------------

    async def _plan(
        self, execution_id: str, state: ExecutionState, items: list[DeciderInput], now: int
    ) -> Append | None:
        before = state
        events: list[Event] = []
        outbox: list[OutboxMessage] = []
        for item in items:
            if isinstance(item, StartChild):
                state, started, replies = await self._start_child(state, item)
                events += started
                outbox += replies
        if state.last_seq == 0 and not events:
            if outbox:  # a child that could not start: its parent is told
                return Append(execution_id, 0, [], state, outbox=outbox)
            log.warning(
                "input for an unknown execution dropped",
                extra={"action": "input.unknown_execution", "execution_id": execution_id},
            )
            return None
        ir = await self._definition(state.definition_hash)
        if ir is None:
            log.error(
                "execution %s names a definition that is not registered",
                execution_id,
                extra={"action": "input.unknown_definition", "execution_id": execution_id},
            )
            return None
        # Schedule and heartbeat deadlines are judged on who holds the delivery now.
        held: dict[str, int | None] = {}
        for item in items:
            if isinstance(item, TimerDue) and item.key.partition(":")[0] in LIVENESS_TIMERS:
                held[item.key] = await self.store.sessions.heartbeat_of(item.key.partition(":")[2])
        for item in items:
            for event in self._accept(state, ir, item, now, held):
                state = evolve(state, event)
                events.append(event)
        state, decided = self._decide(state, ir, now)
        events += decided
        # The timer service deletes the rows it fires: a firing that changed nothing
        # (the decider's clock is behind) must put its timer back.
        timers_before = dict(before.timers)
        refired = [i.key for i in items if isinstance(i, TimerDue) and i.key in state.timers]
        for key in refired:
            timers_before.pop(key, None)
        if not events and not outbox and not refired:
            return None
        outbox += self._messages(state, ir, before, events)
        return Append(
            execution_id,
            before.last_seq,
            events,
            state,
            timers_before=timers_before,
            outbox=outbox,
        )

    def _accept(
        self,
        state: ExecutionState,
        ir: WorkflowIR,
        item: DeciderInput,
        now: int,
        held: dict[str, int | None],
    ) -> list[Event]:
        try:
            if isinstance(item, TaskResult):
                output, error = self._storable_result(item)
                return accept_result(
                    state, ir, item.token, output=output, error=error, worker_id=item.worker_id
                )
            if isinstance(item, TimerDue):
                at = max(now, item.due_at or 0)
                if item.key in held:
                    return accept_liveness_check(state, item.key, at, held[item.key])
                return accept_timer(state, item.key, at)
            if isinstance(item, DeliveryLost):
                return accept_lost_delivery(state, item.token, item.reason)
            if (
                isinstance(item, CancelChild)
                and not state.terminal
                and state.parent_execution_id == item.parent_execution_id
            ):
                return accept_cancel(state, item.reason)
        except OrbitError as error:
            log.warning(
                "input refused: %s",
                error,
                extra={"action": "input.refused", "execution_id": state.execution_id},
            )
        return []  # Wake and StartChild: nothing to accept, only to decide

    def _storable_result(self, result: TaskResult) -> tuple[Any, TaskFailure | None]:
        """The result as it can be stored: one that cannot is a failed attempt instead."""
        if result.error is not None:
            problem = payload_problem(result.error.model_dump(mode="json"))
            if problem is None:
                return None, result.error
            return None, TaskFailure(
                code=result.error.code.replace("\x00", ""),
                message=f"the worker's error could not be stored: it {problem}",
                retryable=result.error.retryable,
            )
        problem = payload_problem(result.output, self.settings.max_payload_bytes)
        if problem is None:
            return result.output, None
        too_large = problem.endswith("(ORBIT_MAX_PAYLOAD_BYTES)")
        code = ErrorCode.PAYLOAD_TOO_LARGE if too_large else ErrorCode.INVALID_OUTPUT
        return None, TaskFailure(code=code, message=f"the output {problem}", retryable=False)

    def _decide(
        self, state: ExecutionState, ir: WorkflowIR, now: int
    ) -> tuple[ExecutionState, list[Event]]:
        """Decide to a fixpoint, answering at once the calls no worker may take."""
        limits = self.settings.limits
        state, events = decide_until_stable(state, ir, now, limits)
        refused = self._refused_now(ir, events)
        while refused:
            answers: list[Event] = []
            for dispatched, failure in refused:
                answers += accept_result(state, ir, dispatched.token, error=failure)
            for event in answers:
                state = evolve(state, event)
            state, more = decide_until_stable(state, ir, now, limits)
            events += answers + more
            refused = self._refused_now(ir, more)
        return state, events

    def _refused_now(
        self, ir: WorkflowIR, events: list[Event]
    ) -> list[tuple[StepDispatched, TaskFailure]]:
        if self.settings.http_adapter_enabled:
            return []
        refused = []
        for event in events:
            if isinstance(event, StepDispatched) and unit_call(ir, event.unit)[1].task == HTTP_TASK:
                failure = TaskFailure(
                    code=ErrorCode.ADAPTER_DISABLED,
                    message="http steps need the HTTP adapter, which is disabled: set"
                    " ORBIT_HTTP_ADAPTER_ENABLED=true for the decider and run the adapter"
                    " (orbit service http-adapter; orbit dev runs it)",
                    retryable=False,
                )
                refused.append((event, failure))
        return refused

    # -- what the events call for ------------------------------------------------

    def _messages(
        self, state: ExecutionState, ir: WorkflowIR, before: ExecutionState, events: list[Event]
    ) -> list[OutboxMessage]:
        messages: list[OutboxMessage] = []
        in_flight = {unit.token for unit in state.units.values() if unit.token}
        for event in events:
            if isinstance(event, StepDispatched) and event.token in in_flight:
                messages.append(self._dispatch(state, ir, event))
            elif isinstance(event, StepCancelled) and state.unit(event.unit).tokens:
                step, call = unit_call(ir, event.unit)
                if step.child is not None and call is step.call:
                    messages.append(self._cancel_child(state, event.unit))
        if state.terminal and not before.terminal and state.parent_execution_id:
            messages.append(self._child_outcome(state))
        return messages

    def _dispatch(
        self, state: ExecutionState, ir: WorkflowIR, event: StepDispatched
    ) -> OutboxMessage:
        step, call = unit_call(ir, event.unit)
        unit = state.unit(event.unit)
        if call.task.startswith("workflow:") and step.child is not None and call is step.call:
            child_id = child_execution_id(state.execution_id, event.unit)
            start = StartChild(
                execution_id=child_id,
                definition_hash=step.child.hash or "",
                input=unit.input,
                parent=f"{state.execution_id}:{event.unit}",
                parent_execution_id=state.execution_id,
                parent_token=event.token,
                root_execution_id=state.trace_root,
            )
            route = self.topology.decider_route(child_id)
            return OutboxMessage(route.exchange, route.routing_key, encode(start))
        is_http = call.task == HTTP_TASK
        version = HTTP_CONTRACT_VERSION if is_http else ir.tasks[call.task].version
        assignment = TaskAssignment(
            execution_id=state.execution_id,
            workflow=state.workflow,
            unit=event.unit,
            task=call.task,
            task_version=version,
            token=event.token,
            attempt=event.attempt,
            idempotency_key=state.idempotency_key(event.unit),
            redelivery=event.redelivery,
            input=unit.input,
            result_route=self.topology.decider_route(state.execution_id),
        )
        self._contracts.add((call.task, version))
        route = self.topology.task_route(call.task, version)
        # The attempt's span (ids derived, orbit_model.trace_ids) parents the worker's.
        span = traceparent(state.trace_root, state.execution_id, event.unit, event.token)
        headers = {"traceparent": span}
        return OutboxMessage(route.exchange, route.routing_key, encode(assignment), headers)

    def _cancel_child(self, state: ExecutionState, unit: str) -> OutboxMessage:
        child_id = child_execution_id(state.execution_id, unit)
        reason = f"its parent {state.execution_id} is stopping"
        route = self.topology.decider_route(child_id)
        cancel = CancelChild(
            execution_id=child_id, parent_execution_id=state.execution_id, reason=reason
        )
        return OutboxMessage(route.exchange, route.routing_key, encode(cancel))

    def _child_outcome(self, state: ExecutionState) -> OutboxMessage:
        parent_id, parent_token = state.parent_execution_id, state.parent_token
        if parent_id is None or parent_token is None:
            raise ValueError(f"{state.execution_id} is not a child execution")
        if state.status == "completed":
            result = TaskResult(execution_id=parent_id, token=parent_token, output=state.output)
        else:
            reason = f": {state.error.message}" if state.error else ""
            result = TaskResult(
                execution_id=parent_id,
                token=parent_token,
                error=TaskFailure(
                    code=ErrorCode.CHILD_FAILED,
                    message=f"child workflow {state.execution_id} {state.status}{reason}",
                    retryable=False,
                    details={
                        "child_execution_id": state.execution_id,
                        "status": state.status,
                        "error": state.error.model_dump(mode="json") if state.error else None,
                    },
                ),
            )
        route = self.topology.decider_route(parent_id)
        return OutboxMessage(route.exchange, route.routing_key, encode(result))

    async def _start_child(
        self, state: ExecutionState, start: StartChild
    ) -> tuple[ExecutionState, list[Event], list[OutboxMessage]]:
        """Create the child unless it exists; a child that already ended answers again."""
        if state.last_seq > 0:
            if (state.parent_execution_id, state.parent) != (
                start.parent_execution_id,
                start.parent,
            ):
                # Ids are chosen by users too: an execution that is not this parent's
                # child is never taken for it, answered for it, or cancelled by it.
                failure = TaskFailure(
                    code=ErrorCode.CHILD_ID_TAKEN,
                    message=f"the child id {start.execution_id} is taken by another execution",
                    retryable=False,
                )
                return state, [], [self._result_to_parent(start, failure)]
            if state.terminal:
                answered = state.model_copy(update={"parent_token": start.parent_token})
                return state, [], [self._child_outcome(answered)]
            if state.parent_token != start.parent_token:
                # The parent retried its step: the child's outcome goes to the new delivery.
                reattached = ParentReattached(parent_token=start.parent_token)
                return evolve(state, reattached), [reattached], []
            return state, [], []
        ir = await self._definition(start.definition_hash)
        if ir is None:
            failure = TaskFailure(
                code=ErrorCode.CHILD_NOT_REGISTERED,
                message=f"the child definition {start.definition_hash} is not registered",
                retryable=False,
            )
            return state, [], [self._result_to_parent(start, failure)]
        try:
            created = start_execution(
                ir,
                start.definition_hash,
                start.execution_id,
                start.input,
                parent=start.parent,
                parent_execution_id=start.parent_execution_id,
                parent_token=start.parent_token,
                root_execution_id=start.root_execution_id,
            )
        except OrbitError as error:
            failure = TaskFailure(code=str(error.code), message=error.message, retryable=False)
            return state, [], [self._result_to_parent(start, failure)]
        return replay([created]), [created], []

    def _result_to_parent(self, start: StartChild, failure: TaskFailure) -> OutboxMessage:
        result = TaskResult(
            execution_id=start.parent_execution_id, token=start.parent_token, error=failure
        )
        route = self.topology.decider_route(start.parent_execution_id)
        return OutboxMessage(route.exchange, route.routing_key, encode(result))


__all__ = ["Committed", "Deciding"]
