"""What happens next: ``decide(state, definition, now) -> events``, pure.

``decide`` looks at an execution's state and returns the events that move it
one round forward; applied and decided again, it eventually returns nothing
(:func:`decide_until_stable` runs those rounds). It never reads a clock:
``now`` is an argument, and every token it mints is derived from the state.

One round does the first of these that has anything to do:

1. start the execution; begin stopping it on cancel, timeout or a limit;
2. while stopping, cancel the units still in flight;
3. react to what happened to units: a failed attempt (retry or fail), a
   fired timer, a lost worker, a unit waiting to be dispatched or to take a
   signal, a fan-out with room for more units or with a failed unit;
4. while stopping: compensations newest first, then ``finally``, then the end;
5. otherwise: schedule or skip the steps whose dependencies are done; on
   success, run ``finally`` and complete.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, Literal

from orbit_model.attempts import next_attempt_event
from orbit_model.contracts import contract_for
from orbit_model.errors import ErrorCode, OrbitError
from orbit_model.events import (
    CompensationStarted,
    Event,
    LimitExceeded,
    StepCancelled,
    StepDispatched,
    StepFailed,
    StepFanOut,
    StepScheduled,
    StepSkipped,
    StepSucceeded,
    TaskFailure,
    TimerStarted,
    WorkflowCancelled,
    WorkflowCompleted,
    WorkflowFailed,
    WorkflowStarted,
    WorkflowTimedOut,
)
from orbit_model.expressions import ExpressionScope, evaluate_template
from orbit_model.fan_out import child_share, fan_out_refusal, starts_child, with_share
from orbit_model.ir import AwaitStep, CallStep, SleepStep, Step, TaskCall, WorkflowIR
from orbit_model.outcome_codes import OutcomeCode
from orbit_model.state import ExecutionState, UnitState, UnitStatus, evolve_all
from orbit_model.state_index import ACTIVE, FanOut
from orbit_model.steps import failure, scope_of
from orbit_model.units import COMPENSATE_PREFIX, FINALLY_PREFIX, element_key, parse_unit

__all__ = ["ACTIVE", "DecisionLoopError", "Limits", "decide", "decide_until_stable"]


@dataclass(frozen=True)
class Limits:
    """Server-wide limits the decider enforces; None means unlimited."""

    max_fan_out: int | None = None
    """``for`` elements a whole tree of executions may fan out to (``LIMIT_EXCEEDED``
    beyond; :mod:`orbit_model.fan_out`)."""
    max_history_events: int | None = None
    """Events per execution; past it the execution fails with ``LIMIT_EXCEEDED``
    (its compensations and cleanup still run)."""


class DecisionLoopError(OrbitError, RuntimeError):
    """``decide`` did not settle: a bug in the decider, never an input's fault (``INTERNAL``)."""

    def __init__(self, message: str) -> None:
        super().__init__(ErrorCode.INTERNAL, message)


def decide(
    state: ExecutionState, definition: WorkflowIR, now: int, limits: Limits = Limits()
) -> list[Event]:
    """The events of the next round for this execution (empty when it has settled)."""
    if state.status == "new" or state.terminal:
        return []
    if state.status == "created":
        timeout = definition.timeout_ms
        return [WorkflowStarted(deadline_at=now + timeout if timeout else None)]
    events = _Round(state, definition, now, limits).events()
    if (
        limits.max_history_events is not None
        and state.abort is None
        and state.limit_exceeded is None
        and events
        and state.last_seq + len(events) > limits.max_history_events
    ):
        return [
            LimitExceeded(
                limit="max_history_events",
                message=f"the execution reached {limits.max_history_events} history events",
            )
        ]
    return events


def decide_until_stable(
    state: ExecutionState,
    definition: WorkflowIR,
    now: int,
    limits: Limits = Limits(),
    max_rounds: int = 100_000,
) -> tuple[ExecutionState, list[Event]]:
    """Decide and apply rounds until nothing is left to do; the new state and all events.

    Raises:
        DecisionLoopError: More than ``max_rounds`` rounds: a decider bug.
    """
    produced: list[Event] = []
    for _ in range(max_rounds):
        events = decide(state, definition, now, limits)
        if not events:
            return state, produced
        state = evolve_all(state, events)
        produced += events
    raise DecisionLoopError(f"no fixpoint after {max_rounds} rounds for {state.execution_id}")


_PENDING_UNIT = UnitState()


def _done(unit: UnitState, step: Step) -> bool:
    """Whether a dependency on this step is satisfied."""
    if unit.status in (UnitStatus.SUCCEEDED, UnitStatus.SKIPPED):
        return True
    return unit.status is UnitStatus.FAILED and step.continue_on_error


class _Round:
    """One round of decisions for one execution."""

    def __init__(
        self, state: ExecutionState, definition: WorkflowIR, now: int, limits: Limits
    ) -> None:
        self.state = state
        self.ir = definition
        self.now = now
        self.limits = limits
        # Signals taken by an await earlier in this round: the state does not show
        # them as taken until the round's events are folded in.
        self.signals_taken: set[int] = set()
        # Elements fanned out earlier in this round, and the share of each child started
        # in it (once known): the state shows neither until the round is folded in.
        self.fanned = 0
        self.share: int | Literal["unknown"] | None = "unknown"

    def events(self) -> list[Event]:
        state = self.state
        if state.abort is None:
            stop = self._stop_cause()
            if stop is not None:
                return [stop]
        else:
            cancels: list[Event] = [
                StepCancelled(unit=key)
                for key in state.active_units()
                if parse_unit(key).role in ("step", "element")
            ]
            if cancels:
                return cancels
        reactions = self._reactions()
        if reactions:
            return reactions
        if state.abort is not None:
            return self._stopping()
        return self._progress()

    # -- stopping ---------------------------------------------------------

    def _stop_cause(self) -> CompensationStarted | None:
        state = self.state
        if state.limit_exceeded is not None:
            error = failure(OutcomeCode.LIMIT_EXCEEDED, state.limit_exceeded)
            return CompensationStarted(cause="failed", error=error)
        if state.cancel_reason is not None:
            return CompensationStarted(cause="cancelled")
        if state.deadline_passed:
            error = failure(OutcomeCode.TIMEOUT, "the workflow timeout passed")
            return CompensationStarted(cause="timed_out", error=error)
        for step in self.ir.steps:
            unit = state.unit(step.id)
            if unit.status is UnitStatus.FAILED and not step.continue_on_error:
                error = unit.error or failure(ErrorCode.INTERNAL, "the step failed")
                return CompensationStarted(
                    cause="failed",
                    error=TaskFailure(
                        code=error.code,
                        message=f"step {step.id!r} failed: {error.message}",
                        retryable=False,
                        details={"step": step.id, "code": error.code},
                        # The step's own error, details and all, where it happened.
                        cause=error.caused_by(step.id, state.execution_id),
                    ),
                )
        return None

    def _stopping(self) -> list[Event]:
        state = self.state
        succeeded = sorted(
            (
                step
                for step in self.ir.steps
                if isinstance(step, CallStep)
                and step.compensate is not None
                and state.unit(step.id).status is UnitStatus.SUCCEEDED
            ),
            key=lambda step: -(state.unit(step.id).resolved_seq or 0),
        )
        for step in succeeded:
            key = COMPENSATE_PREFIX + step.id
            unit = state.unit(key)
            if unit.status is UnitStatus.PENDING:
                assert step.compensate is not None
                return self._schedule_call(key, step.compensate.call, item=None, index=None)
            if not unit.status.resolved:
                return []
        cleanup = self._progress_finally()
        if cleanup is not None:
            return cleanup
        abort = state.abort
        assert abort is not None
        outcome = self._compensation_outcome([step.id for step in succeeded])
        if abort.cause == "cancelled":
            return [WorkflowCancelled(reason=state.cancel_reason or "", compensation=outcome)]
        if abort.cause == "timed_out":
            return [WorkflowTimedOut(compensation=outcome)]
        error = abort.error or failure(ErrorCode.INTERNAL, "the execution failed")
        return [WorkflowFailed(error=error, compensation=outcome)]

    def _compensation_outcome(self, steps: list[str]) -> Any:
        if not steps:
            return "none"
        failed = any(
            self.state.unit(COMPENSATE_PREFIX + step).status is not UnitStatus.SUCCEEDED
            for step in steps
        )
        return "failed" if failed else "completed"

    # -- progress ---------------------------------------------------------

    def _progress(self) -> list[Event]:
        events: list[Event] = []
        all_done = True
        for step in self.ir.steps:
            unit = self.state.unit(step.id)
            if not _done(unit, step):
                all_done = False
            if unit.status is UnitStatus.PENDING:
                events += self._start(step, step.id, [(d, self.ir.step(d)) for d in step.after])
        if events or not all_done:
            return events
        try:
            # Once: over a large fan-out's outputs an evaluation is not cheap.
            output = self._output()
        except OrbitError as error:
            return [CompensationStarted(cause="failed", error=failure(error.code, error.message))]
        cleanup = self._progress_finally()
        if cleanup is not None:
            return cleanup
        return [WorkflowCompleted(output=output)]

    def _progress_finally(self) -> list[Event] | None:
        """Events for ``finally`` steps, ``[]`` while waiting, None once all are resolved."""
        events: list[Event] = []
        all_resolved = True
        for step in self.ir.finally_steps:
            key = FINALLY_PREFIX + step.id
            unit = self.state.unit(key)
            if not unit.status.resolved:
                all_resolved = False
            if unit.status is UnitStatus.PENDING:
                # Cleanup runs whatever happened before: a resolved dependency is done.
                dependencies = [self.state.unit(FINALLY_PREFIX + d) for d in step.after]
                if all(d.status.resolved for d in dependencies):
                    events += self._schedule(step, key)
        return None if all_resolved else events

    def _start(self, step: Step, key: str, dependencies: list[tuple[str, Step]]) -> list[Event]:
        units = [(self.state.unit(d), dep) for d, dep in dependencies]
        if not all(_done(unit, dep) for unit, dep in units):
            return []
        if (
            units
            and not step.explicit_after
            and all(u.status is UnitStatus.SKIPPED for u, _ in units)
        ):
            return [StepSkipped(unit=key, reason="every step it depends on was skipped")]
        return self._schedule(step, key)

    def _schedule(self, step: Step, key: str) -> list[Event]:
        try:
            if step.when is not None:
                condition = evaluate_template(step.when, self._scope())
                if not isinstance(condition, bool):
                    raise OrbitError(
                        ErrorCode.EXPRESSION_ERROR, f"if must be true or false, not {condition!r}"
                    )
                if not condition:
                    return [StepSkipped(unit=key, reason="its if was false")]
            if isinstance(step, CallStep) and step.for_each is not None:
                return self._fan_out(step, key)
        except OrbitError as error:
            return [StepFailed(unit=key, error=failure(error.code, error.message))]
        if isinstance(step, CallStep):
            return self._schedule_call(key, step.call, item=None, index=None)
        return [StepScheduled(unit=key)]

    def _fan_out(self, step: CallStep, key: str) -> list[Event]:
        items = evaluate_template(step.for_each, self._scope())
        if not isinstance(items, list):
            kind = type(items).__name__
            return [
                StepFailed(
                    unit=key,
                    error=failure(OutcomeCode.INVALID_FAN_OUT, f"for must give a list, not {kind}"),
                )
            ]
        refusal = fan_out_refusal(self.state, self.limits.max_fan_out, len(items), self.fanned)
        if refusal is not None:
            return [StepFailed(unit=key, error=failure(OutcomeCode.LIMIT_EXCEEDED, refusal))]
        self.fanned += len(items)
        return [StepFanOut(unit=key, items=items)]

    def _schedule_call(self, key: str, call: TaskCall, item: Any, index: int | None) -> list[Event]:
        try:
            value = evaluate_template(call.input, self._scope(item=item, index=index, attempt=1))
            contract = self.ir.tasks.get(call.task)
            if contract is not None and contract.input_schema is not None:
                value = contract_for(contract.input_schema).apply(
                    value, f"the input of {call.task}"
                )
        except OrbitError as error:
            code = error.code
            if code is ErrorCode.INVALID_INPUT:
                code = OutcomeCode.INPUT_CONTRACT_VIOLATION
            return [StepFailed(unit=key, error=failure(code, error.message))]
        return [StepScheduled(unit=key, input=value)]

    def _scope(
        self, item: Any = None, index: int | None = None, attempt: int | None = None
    ) -> ExpressionScope:
        return scope_of(self.state, self.ir, item=item, index=index, attempt=attempt)

    def _output(self) -> Any:
        """The workflow's output, checked against its ``output_schema`` (defaults applied):
        the contract its callers and a parent rely on, so breaking it fails the execution.

        Raises:
            OrbitError: The output expression failed, or ``OUTPUT_CONTRACT_VIOLATION``
                naming the JSON path of each bad value.
        """
        try:
            output = evaluate_template(self.ir.output, self._scope())
        except OrbitError as error:
            code = error.code  # the expression's own: EXPRESSION_ERROR, …
            raise OrbitError(code, f"the workflow output: {error.message}") from None
        if self.ir.output_schema is None:
            return output
        try:
            return contract_for(self.ir.output_schema).apply(output, "the workflow output")
        except OrbitError as violation:
            raise OrbitError(ErrorCode.OUTPUT_CONTRACT_VIOLATION, violation.message) from None

    # -- reacting to units ------------------------------------------------

    def _reactions(self) -> list[Event]:
        """Every unit's reaction, skipping a unit another reaction of this round touches.

        All are computed from the same state, so two reactions on one unit
        (a fan-out cancelling an element that would be dispatched) would
        conflict; the skipped one is reconsidered next round.
        """
        events: list[Event] = []
        touched: set[str] = set()
        # Only the units that can react (the fold keeps them: state_index.reacts).
        for key in self.state.reactive_units():
            reaction = list(self._react(key))
            units = {event.unit for event in reaction if hasattr(event, "unit")}
            if reaction and not units & touched:
                events += reaction
                touched |= units
        return events

    def _react(self, key: str) -> Iterator[Event]:
        unit = self.state.unit(key)
        if unit.status.resolved or unit.status is UnitStatus.PENDING:
            return
        parsed = parse_unit(key)
        step = self._step_of(parsed.step, parsed.role)
        if isinstance(step, CallStep) and parsed.role == "step" and unit.items is not None:
            yield from self._react_fan_out(key, step, unit)
            return
        if isinstance(step, SleepStep):
            yield from self._react_sleep(key, step, unit)
            return
        if isinstance(step, AwaitStep):
            yield from self._react_await(key, step, unit)
            return
        call = self._call_of(step, parsed.role)
        yield from self._react_call(key, call, unit)

    def _step_of(self, step_id: str, role: str) -> Step:
        if role == "finally":
            return next(step for step in self.ir.finally_steps if step.id == step_id)
        return self.ir.step(step_id)

    @staticmethod
    def _call_of(step: Step, role: str) -> TaskCall:
        assert isinstance(step, CallStep)
        if role == "compensate":
            assert step.compensate is not None
            return step.compensate.call
        return step.call

    def _react_call(self, key: str, call: TaskCall, unit: UnitState) -> Iterator[Event]:
        if self.state.abort is not None and parse_unit(key).role in ("step", "element"):
            return
        event = next_attempt_event(self.state, key, call, unit, self.now)
        if isinstance(event, StepDispatched) and starts_child(call.task):
            if self.share == "unknown":
                self.share = child_share(self.state, self.ir, self.limits.max_fan_out)
            event = with_share(self.state, event, self.share)
        if event is not None:
            yield event

    def _react_sleep(self, key: str, step: SleepStep, unit: UnitState) -> Iterator[Event]:
        if unit.due_at is None:
            yield TimerStarted(unit=key, due_at=self.now + step.duration_ms)
        elif unit.timer_fired:
            yield StepSucceeded(unit=key)

    def _react_await(self, key: str, step: AwaitStep, unit: UnitState) -> Iterator[Event]:
        # The oldest untaken signal of the name, from the first that may be untaken.
        queue = self.state.index.queues.get(step.signal)
        if queue is not None:
            signals = self.state.signals
            for position in queue.positions.iter_from(queue.head):
                if signals[position].taken_by is None and position not in self.signals_taken:
                    self.signals_taken.add(position)
                    yield StepSucceeded(unit=key, output=signals[position].payload, signal=position)
                    return
        if unit.timer_fired:
            message = f"no signal {step.signal!r} within {step.timeout_ms} ms"
            yield StepFailed(unit=key, error=failure(OutcomeCode.TIMEOUT, message))
        elif step.timeout_ms is not None and unit.due_at is None:
            yield TimerStarted(unit=key, due_at=self.now + step.timeout_ms)

    def _react_fan_out(self, key: str, step: CallStep, parent: UnitState) -> Iterator[Event]:
        items = parent.items or ()
        units = self.state.units
        # The fold counts the elements (state_index.FanOut): a round looks at a large
        # fan-out every time, and must not walk its elements to learn where it is.
        counts = self.state.index.fan_outs.get(key) or FanOut(len(items))
        if counts.failed:
            element = element_key(key, min(counts.failed))
            error = units[element].error or failure(ErrorCode.INTERNAL, "an element failed")
            # The element's error, saying which element it was: a cause chain names it.
            yield StepFailed(unit=key, error=error.caused_by(element))
            for index in range(len(items)):
                if units.get(element_key(key, index), _PENDING_UNIT).status in ACTIVE:
                    yield StepCancelled(unit=element_key(key, index))
            return
        if counts.succeeded == len(items):
            outputs = [units[element_key(key, index)].output for index in range(len(items))]
            yield StepSucceeded(unit=key, output=outputs)
            return
        room = (step.concurrency or len(items)) - counts.active
        index = counts.low
        while room > 0 and index < len(items):
            element = element_key(key, index)
            if units.get(element, _PENDING_UNIT).status is UnitStatus.PENDING:
                yield from self._schedule_call(element, step.call, item=items[index], index=index)
                room -= 1
            index += 1
