"""One execution's turn in a decider batch: its inputs in, events and messages out.

:func:`plan` is everything the decider service does for one execution
between reading its state and committing, without the I/O: a child start
first, then each input turned into events (:mod:`orbit_model.inputs`), a
worker's result kept only if it can be stored, the rounds of
:func:`~orbit_model.decider.decide_until_stable` with the calls no worker may
take answered at once (http steps while the HTTP adapter is disabled), and
the messages the new events call for (:mod:`orbit_model.outgoing`). The
simulator and the stateful tests run the same function.

What ``plan`` needs that only I/O can tell is given to it: the execution's
definition and its children's, and for a schedule or heartbeat deadline when
the delivery's task last heartbeated (:class:`Facts`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from orbit_model.broker_roles import Sender
from orbit_model.children import cancel_applies, parent_waits, start_child
from orbit_model.decider import Limits, decide_until_stable
from orbit_model.errors import OrbitError
from orbit_model.events import Event, StepDispatched, TaskFailure
from orbit_model.inputs import (
    accept_cancel,
    accept_liveness_check,
    accept_lost_delivery,
    accept_result,
    accept_timer,
    check_sender,
)
from orbit_model.ir import HTTP_TASK, WorkflowIR
from orbit_model.messages import (
    CancelChild,
    DeciderInput,
    DeliveryLost,
    MessageParked,
    Outgoing,
    StartChild,
    TaskResult,
    TimerDue,
)
from orbit_model.outcome_codes import OutcomeCode
from orbit_model.outgoing import messages_for
from orbit_model.parked import accept_parked
from orbit_model.payloads import DEFAULT_MAX_DEPTH, payload_problem
from orbit_model.state import ExecutionState, evolve, evolve_all
from orbit_model.steps import unit_call
from orbit_model.timer_keys import MalformedTimerKey, TimerKey
from orbit_model.topology import Topology

ADAPTER_DISABLED_MESSAGE = (
    "http steps need the HTTP adapter, which is disabled: set"
    " ORBIT_HTTP_ADAPTER_ENABLED=true for the decider and run the adapter"
    " (orbit service http-adapter; orbit dev runs it)"
)


MAX_CLOCK_SKEW_MS = 5_000
"""How far ahead of the decider's clock a timer firing's ``due_at`` is believed. Both
services read Postgres's clock (``runtime.clock``), so theirs differ by a round trip or
two; a ``due_at`` further ahead is not believed (a forged one would fire early)."""


@dataclass(frozen=True)
class Policy:
    """How the decider is configured (its part of the settings)."""

    limits: Limits = field(default_factory=Limits)
    http_adapter_enabled: bool = False
    """Whether http steps are dispatched to the adapter; if not, they fail at once."""
    max_payload_bytes: int | None = None
    max_payload_depth: int = DEFAULT_MAX_DEPTH
    """How deep an output may nest (``ORBIT_MAX_PAYLOAD_DEPTH``)."""
    """The largest output a result may store (``ORBIT_MAX_PAYLOAD_BYTES``)."""


@dataclass(frozen=True)
class Facts:
    """What only I/O can tell a turn.

    Attributes:
        definition: The execution's definition (None for a child not started yet).
        children: Child definitions by hash, for the ``StartChild`` inputs.
        heartbeats: For each schedule or heartbeat timer key among the inputs,
            when its delivery's task last heartbeated (epoch ms; None: nobody holds it).
        parents: For a ``StartChild`` that creates its child, the parent's state by
            id (whether it still waits for the child).
        held: Of the tokens ``DeliveryLost`` inputs name, those an open worker session
            still holds: such a report is stale or forged, and changes nothing.
        senders: Who speaks in each input, in the order of the inputs: a
            ``TaskResult``'s sender, and for a ``MessageParked`` about a result the
            sender of that result. None, or none at all: not checked (one RabbitMQ
            user for all). A result is taken only from who may answer its task
            (:func:`~orbit_model.inputs.answer_refusal`).
    """

    definition: WorkflowIR | None = None
    children: Mapping[str, WorkflowIR] = field(default_factory=dict)
    heartbeats: Mapping[str, int | None] = field(default_factory=dict)
    parents: Mapping[str, ExecutionState] = field(default_factory=dict)
    held: frozenset[str] = frozenset()
    senders: Sequence[Sender | None] = ()

    def sender(self, index: int) -> Sender | None:
        """Who speaks in the input at ``index``; None: not checked."""
        return self.senders[index] if index < len(self.senders) else None


@dataclass(frozen=True)
class Plan:
    """What one execution's turn appends and sends.

    Attributes:
        before: The state the turn started from.
        state: The state after ``events``.
        events: The events to append after ``before.last_seq``.
        messages: What to publish once they are committed.
        refired: Timers fired but still wanted (the decider's clock was behind):
            the timer service deleted their rows, so they are written again.
        refused: Inputs the execution refused, with why (to log; never an event).
    """

    before: ExecutionState
    state: ExecutionState
    events: list[Event]
    messages: list[Outgoing]
    refired: list[str] = field(default_factory=list)
    refused: list[tuple[DeciderInput, OrbitError]] = field(default_factory=list)

    @property
    def writes(self) -> bool:
        """Whether there is anything to commit."""
        return bool(self.events or self.messages or self.refired)

    @property
    def timers_before(self) -> dict[str, int]:
        """The timers to diff ``state``'s against: a refired one is written again."""
        timers = dict(self.before.timers)
        for key in self.refired:
            timers.pop(key, None)
        return timers


def liveness_key(item: DeciderInput) -> TimerKey | None:
    """The timer key of a schedule or heartbeat deadline among the inputs, else None:
    those are judged on who holds the delivery now (a :class:`Facts` heartbeat, under
    the key's text)."""
    if not isinstance(item, TimerDue):
        return None
    try:
        key = TimerKey.parse(item.key)
    except MalformedTimerKey:  # no timer the execution waits on: accept_timer ignores it
        return None
    return key if key.kind.is_liveness else None


def plan(
    state: ExecutionState,
    inputs: Sequence[DeciderInput],
    facts: Facts,
    *,
    now: int,
    policy: Policy,
    topology: Topology,
) -> Plan | None:
    """The events and messages of one execution's inputs; None if it does not exist
    (and no child start could create it) or its definition is unknown."""
    before = state
    events: list[Event] = []
    messages: list[Outgoing] = []
    for item in inputs:
        if isinstance(item, StartChild):
            created = state.last_seq == 0
            started = start_child(state, item, facts.children.get(item.definition_hash), topology)
            state = started.state
            events += started.events
            messages += started.answers
            parent = facts.parents.get(item.parent_execution_id)
            if created and state.last_seq > 0 and not parent_waits(parent, item):
                # Its parent's cancel overtook this start, and found no child then.
                reason = f"its parent {item.parent_execution_id} stopped before it started"
                for event in accept_cancel(state, reason):
                    state = evolve(state, event)
                    events.append(event)
    if state.last_seq == 0 and not events:
        # A child that could not start answers its parent; anything else is dropped.
        return Plan(before, state, [], messages) if messages else None
    ir = (
        facts.definition
        if facts.definition is not None
        else facts.children.get(state.definition_hash)
    )
    if ir is None:
        return None
    refused: list[tuple[DeciderInput, OrbitError]] = []
    for index, item in enumerate(inputs):
        try:
            sender = facts.sender(index)
            accepted = accept_input(
                state, ir, item, now=now, facts=facts, policy=policy, sender=sender
            )
        except OrbitError as error:
            refused.append((item, error))
            continue
        state = evolve_all(state, accepted)
        events += accepted
    state, decided = decide_answering(state, ir, now, policy)
    events += decided
    # The timer service deletes the rows it fires: some must be written again.
    refired = _refired(state, inputs, now)
    messages += messages_for(before, state, ir, events, topology)
    return Plan(before, state, events, messages, refired, refused)


def _refired(state: ExecutionState, inputs: Sequence[DeciderInput], now: int) -> list[str]:
    """The timers to write again: each fired but still wanted (the decider's clock was
    behind), and, when a firing was parked after the timer service deleted its row,
    every timer still wanted and already due, so that it fires again (the history
    records the loss, ``MessageLost``, and the execution recovers)."""
    refired = [i.key for i in inputs if isinstance(i, TimerDue) and i.key in state.timers]
    if any(isinstance(i, MessageParked) and i.message_type == "TimerDue" for i in inputs):
        refired += [key for key, due in state.timers.items() if due <= now and key not in refired]
    return refired


def accept_input(
    state: ExecutionState,
    ir: WorkflowIR,
    item: DeciderInput,
    *,
    now: int,
    facts: Facts,
    policy: Policy,
    sender: Sender | None = None,
) -> list[Event]:
    """The events one input adds (a ``Wake`` or ``StartChild`` adds none: only a decision);
    ``sender``: who speaks in it (:attr:`Facts.senders`).

    Raises:
        OrbitError: The execution refuses it (a result from a user that may not answer
            its task, …).
    """
    if isinstance(item, TaskResult):
        check_sender(state, ir, item.token, sender)
        output, error = storable_result(item, policy.max_payload_bytes, policy.max_payload_depth)
        child = _answers_a_child_step(state, ir, item.token)
        if error is not None and not child:
            # Where an error happened is the engine's to say: a worker's says it only
            # through what the engine fills in once it becomes a cause.
            error = error.as_sent()
        return accept_result(
            state,
            ir,
            item.token,
            output=output,
            error=error,
            worker_id=item.worker_id,
            fan_out_used=item.fan_out_used if child else None,
        )
    if isinstance(item, TimerDue):
        # A firing never counts as earlier than it was due, when this decider's clock is
        # a little behind the timer service's; but not more than a little: a forged
        # due_at far ahead would fire a timer (or the workflow's deadline) at once.
        at = max(now, min(item.due_at or 0, now + MAX_CLOCK_SKEW_MS))
        if item.key in facts.heartbeats:
            return accept_liveness_check(state, item.key, at, facts.heartbeats[item.key])
        return accept_timer(state, item.key, at)
    if isinstance(item, DeliveryLost):
        if item.token in facts.held:  # a worker still runs it: nothing was lost
            return []
        return accept_lost_delivery(state, item.token, item.reason)
    if isinstance(item, MessageParked):
        if item.message_type == "TaskResult" and item.token is not None:
            check_sender(state, ir, item.token, sender)  # as the result itself would be
        return accept_parked(state, item)
    if isinstance(item, CancelChild) and cancel_applies(state, item):
        return accept_cancel(state, item.reason)
    return []


def _answers_a_child_step(state: ExecutionState, ir: WorkflowIR, token: str) -> bool:
    """Whether ``token`` is a child workflow step's: only its child knows it, and that
    child's outcome carries a cause chain the engine made."""
    key = state.unit_of_token(token)
    if key is None:
        return False
    try:
        step, call = unit_call(ir, key)
    except (KeyError, StopIteration):
        return False
    return step.child is not None and call is step.call


def storable_result(
    result: TaskResult, max_payload_bytes: int | None, max_depth: int = DEFAULT_MAX_DEPTH
) -> tuple[Any, TaskFailure | None]:
    """The result as it can be stored: one that cannot is a failed attempt instead.

    An output that is not JSON Postgres can hold (a NUL character, a lone
    surrogate, a NaN) fails the attempt with ``INVALID_OUTPUT``; one over
    ``max_payload_bytes`` with ``PAYLOAD_TOO_LARGE``; neither is retried. An
    error that cannot be stored keeps its code (without NULs) and says why.
    """
    if result.error is not None:
        # The whole error, its cause chain included, within the limits of an output.
        problem = payload_problem(
            result.error.model_dump(mode="json"), max_payload_bytes, max_depth
        )
        if problem is None:
            return None, result.error
        return None, TaskFailure(
            code=result.error.code.replace("\x00", ""),
            message=f"the worker's error could not be stored: it {problem}",
            retryable=result.error.retryable,
        )
    problem = payload_problem(result.output, max_payload_bytes, max_depth)
    if problem is None:
        return result.output, None
    code = OutcomeCode.PAYLOAD_TOO_LARGE if problem.too_large else OutcomeCode.INVALID_OUTPUT
    return None, TaskFailure(code=code, message=f"the output {problem}", retryable=False)


def decide_answering(
    state: ExecutionState, ir: WorkflowIR, now: int, policy: Policy
) -> tuple[ExecutionState, list[Event]]:
    """Decide to a fixpoint, answering at once the calls no worker may take.

    While the HTTP adapter is disabled, every http step dispatched fails at
    once with ``ADAPTER_DISABLED`` (not retryable), and the rounds go on from
    there: nothing waits for a worker that will never come.
    """
    state, events = decide_until_stable(state, ir, now, policy.limits)
    refused = _refused_now(ir, events, policy)
    while refused:
        answers: list[Event] = []
        for dispatched in refused:
            failure = TaskFailure(
                code=OutcomeCode.ADAPTER_DISABLED, message=ADAPTER_DISABLED_MESSAGE, retryable=False
            )
            answers += accept_result(state, ir, dispatched.token, error=failure)
        state = evolve_all(state, answers)
        state, more = decide_until_stable(state, ir, now, policy.limits)
        events += answers + more
        refused = _refused_now(ir, more, policy)
    return state, events


def _refused_now(ir: WorkflowIR, events: list[Event], policy: Policy) -> list[StepDispatched]:
    if policy.http_adapter_enabled:
        return []
    return [
        event
        for event in events
        if isinstance(event, StepDispatched) and unit_call(ir, event.unit)[1].task == HTTP_TASK
    ]
