"""What the decider looks up in a state, kept up to date by the fold instead of searched.

A round of the decider used to look at every unit (which can react? which
time out?), every element of a ``for`` (how many run, which is next?) and
every buffered signal (which is the oldest untaken one of a name?): with n
elements that is O(n) per round and O(n²) per execution. The fold keeps
these answers instead, changing only what an event touches:

- ``active``: the units in flight or about to be (:data:`ACTIVE`), which a
  stop cancels; ``reactive``: those a round must look at (:func:`reacts`);
  ``timed``: those that wait on a timer.
- ``fan_outs``: per ``for`` step, how many elements succeeded and are in
  flight, which failed, and below which element none is pending.
- ``queues``: per signal name, where its signals are and the first that
  may be untaken; ``last_payloads``: what ``signals.X`` reads;
  ``requests``: the seq of each signal request id.

An index is derived data: never dumped, rebuilt from the units and signals
when a state is read from JSON (:func:`build_index`), so it cannot disagree
with what it indexes.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from orbit_model.persistent import PVector, Units
from orbit_model.records import BufferedSignal, UnitState, UnitStatus
from orbit_model.timer_keys import TimerKey, TimerKind
from orbit_model.units import element_key, parse_unit

#: Units with work in flight or about to be.
ACTIVE = frozenset(
    {UnitStatus.SCHEDULED, UnitStatus.DISPATCHED, UnitStatus.UNCERTAIN, UnitStatus.RETRY_WAIT}
)


def reacts(unit: UnitState) -> bool:
    """Whether a round must look at the unit: most units of a large execution are
    done, or wait on a worker or a timer, and cannot react now."""
    status = unit.status
    if status.resolved or status is UnitStatus.PENDING:
        return False
    if status is UnitStatus.DISPATCHED:
        failed_attempt = unit.token is None and unit.error is not None
        timed_out = unit.token is not None and unit.timed_out_token == unit.token
        return failed_attempt or timed_out
    if status is UnitStatus.RETRY_WAIT:
        return unit.timer_fired
    return True


def unit_timers(key: str, unit: UnitState) -> Iterator[tuple[str, int]]:
    """The timers the unit waits on, by key, with their due times."""
    if unit.due_at is not None and not unit.timer_fired and not unit.status.resolved:
        kind = TimerKind.RETRY if unit.status is UnitStatus.RETRY_WAIT else TimerKind.TIMER
        yield str(TimerKey(kind, key)), unit.due_at
    if unit.status is UnitStatus.DISPATCHED and unit.token is not None:
        if unit.timeout_at is not None and unit.timed_out_token != unit.token:
            yield str(TimerKey(TimerKind.TIMEOUT, unit.token)), unit.timeout_at
        if unit.schedule_deadline_at is not None:
            yield str(TimerKey(TimerKind.SCHEDULE, unit.token)), unit.schedule_deadline_at
        if unit.heartbeat_check_at is not None:
            yield str(TimerKey(TimerKind.HEARTBEAT, unit.token)), unit.heartbeat_check_at


@dataclass(frozen=True)
class FanOut:
    """A ``for`` step's elements, counted."""

    total: int
    succeeded: int = 0
    active: int = 0
    failed: frozenset[int] = frozenset()
    low: int = 0
    """Every element below this one has left pending (elements never go back)."""


@dataclass(frozen=True)
class SignalQueue:
    """The signals of one name: their positions among all signals, oldest first."""

    positions: PVector[int]
    head: int = 0
    """Every signal of the name before this position (in ``positions``) is taken."""


@dataclass(frozen=True)
class StateIndex:
    active: frozenset[str] = frozenset()
    reactive: frozenset[str] = frozenset()
    timed: frozenset[str] = frozenset()
    fan_outs: Mapping[str, FanOut] = field(default_factory=dict)
    queues: Mapping[str, SignalQueue] = field(default_factory=dict)
    last_payloads: Mapping[str, Any] = field(default_factory=dict)
    requests: Units[int] = field(default_factory=Units)
    """The seq of each signal request id (the first signal that had it)."""


def _element_of(key: str) -> tuple[str, int] | None:
    """``(step, index)`` for an element key such as ``ship[3]``."""
    if not key.endswith("]"):
        return None
    parsed = parse_unit(key)
    if parsed.role != "element" or parsed.index is None:
        return None
    return parsed.step, parsed.index


def _counted(units: Mapping[str, UnitState], key: str, total: int) -> FanOut:
    """A ``for`` step's counts from its elements (once, when it fans out)."""
    succeeded = active = 0
    failed: set[int] = set()
    for index in range(total):
        element = units.get(element_key(key, index))
        if element is None:
            continue
        if element.status is UnitStatus.SUCCEEDED:
            succeeded += 1
        elif element.status is UnitStatus.FAILED:
            failed.add(index)
        elif element.status in ACTIVE:
            active += 1
    return _low_moved(units, key, FanOut(total, succeeded, active, frozenset(failed)))


def _low_moved(units: Mapping[str, UnitState], key: str, counts: FanOut) -> FanOut:
    low = counts.low
    while low < counts.total:
        element = units.get(element_key(key, low))
        if element is None or element.status is UnitStatus.PENDING:
            break
        low += 1
    return counts if low == counts.low else replace(counts, low=low)


class IndexUpdate:
    """An index being changed by a batch of events (copied once per batch)."""

    def __init__(self, index: StateIndex) -> None:
        self.index = index
        self.active = set(index.active)
        self.reactive = set(index.reactive)
        self.timed = set(index.timed)
        self.fan_outs = dict(index.fan_outs)
        self.queues = dict(index.queues)
        self.last_payloads = dict(index.last_payloads)
        self.requests = index.requests

    def unit_changed(
        self, units: Mapping[str, UnitState], key: str, old: UnitState, new: UnitState
    ) -> None:
        """``key`` went from ``old`` to ``new`` (``units`` is the mapping after)."""
        self.unit_is(key, new)
        if new.items is not None and key not in self.fan_outs:
            self.fan_outs[key] = _counted(units, key, len(new.items))
        element = _element_of(key) if old.status is not new.status else None
        if element is None or element[0] not in self.fan_outs:
            return
        parent, index = element
        counts = self.fan_outs[parent]
        if index >= counts.total:
            return
        succeeded = counts.succeeded + _delta(old, new, UnitStatus.SUCCEEDED)
        active = counts.active + (new.status in ACTIVE) - (old.status in ACTIVE)
        failed = counts.failed
        if new.status is UnitStatus.FAILED:
            failed = failed | {index}
        elif old.status is UnitStatus.FAILED:
            failed = failed - {index}
        counts = FanOut(counts.total, succeeded, active, failed, counts.low)
        self.fan_outs[parent] = _low_moved(units, parent, counts)

    def unit_is(self, key: str, unit: UnitState) -> None:
        """Put ``key`` in the sets it now belongs to, and in no other."""
        _mark(self.active, key, unit.status in ACTIVE)
        _mark(self.reactive, key, reacts(unit))
        _mark(self.timed, key, next(unit_timers(key, unit), None) is not None)

    def signal_added(self, position: int, signal: BufferedSignal) -> None:
        queue = self.queues.get(signal.name)
        positions = queue.positions if queue is not None else PVector[int]()
        head = queue.head if queue is not None else 0
        self.queues[signal.name] = SignalQueue(positions.append(position), head)
        self.last_payloads[signal.name] = signal.payload
        if signal.request_id is not None and signal.request_id not in self.requests:
            self.requests = self.requests.set(signal.request_id, signal.seq)

    def signal_taken(self, signals: PVector[BufferedSignal], position: int) -> None:
        name = signals[position].name
        queue = self.queues.get(name)
        if queue is None:
            return
        head = queue.head
        while head < len(queue.positions) and signals[queue.positions[head]].taken_by is not None:
            head += 1
        if head != queue.head:
            self.queues[name] = SignalQueue(queue.positions, head)

    def freeze(self) -> StateIndex:
        return StateIndex(
            active=frozenset(self.active),
            reactive=frozenset(self.reactive),
            timed=frozenset(self.timed),
            fan_outs=self.fan_outs,
            queues=self.queues,
            last_payloads=self.last_payloads,
            requests=self.requests,
        )


def _mark(keys: set[str], key: str, member: bool) -> None:
    if member:
        keys.add(key)
    else:
        keys.discard(key)


def _delta(old: UnitState, new: UnitState, status: UnitStatus) -> int:
    return (new.status is status) - (old.status is status)


def build_index(units: Mapping[str, UnitState], signals: PVector[BufferedSignal]) -> StateIndex:
    """The index of a state read whole (from JSON, or built by hand)."""
    update = IndexUpdate(StateIndex())
    for key, unit in units.items():
        update.unit_is(key, unit)
        if unit.items is not None:
            update.fan_outs[key] = _counted(units, key, len(unit.items))
    for position, signal in enumerate(signals):
        update.signal_added(position, signal)
    for position, signal in enumerate(signals):
        if signal.taken_by is not None:
            update.signal_taken(signals, position)
    return update.freeze()
