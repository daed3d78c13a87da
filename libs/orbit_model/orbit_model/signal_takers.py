"""Which ``await`` step takes a signal: what the answer to a signal tells its sender.

A signal is buffered in the execution's state until an ``await`` step of its
name takes it, the oldest untaken one first (docs/architecture.md). So a
signal that no step waits for is not lost, but it may never be taken: every
``await`` of its name may have run already, or there may be none. The sender
is told which it is, from the state right after the signal was recorded:

- ``now``: an ``await`` of its name waits, and it is next in line: the step
  takes it at the decider's next turn;
- ``later``: none waits for it now (or those that wait take older signals
  first); it stays buffered until an ``await`` not reached yet takes it;
- ``never``: no ``await`` of its name is left to take it (a stopping
  execution runs only its ``finally`` steps, and they never await);
  ``signals.NAME`` still reads its payload;
- ``already``: a signal sent again with its ``request_id``, taken before.
"""

from __future__ import annotations

from bisect import bisect_left
from dataclasses import dataclass
from typing import Literal

from orbit_model.ir import AwaitStep, WorkflowIR
from orbit_model.records import UnitStatus
from orbit_model.state import ExecutionState
from orbit_model.units import parse_unit

Taken = Literal["now", "later", "never", "already"]


@dataclass(frozen=True)
class SignalTakers:
    taken: Taken
    steps: tuple[str, ...]
    """The ``await`` steps meant by ``taken``: those that wait (``now``), those not
    reached yet (``later``), the one that took it (``already``); none for ``never``."""


def _awaits(state: ExecutionState, ir: WorkflowIR, name: str) -> tuple[list[str], list[str]]:
    """The ``await`` steps of ``name`` that wait now, and those that may still run."""
    waiting: list[str] = []
    later: list[str] = []
    if state.abort is not None or state.cancel_reason is not None:
        return waiting, later  # it stops: only its ``finally`` steps run, and none awaits
    for step in ir.steps:
        if not isinstance(step, AwaitStep) or step.signal != name:
            continue
        status = state.unit(step.id).status
        if status is UnitStatus.PENDING:
            later.append(step.id)
        elif not status.resolved:
            waiting.append(step.id)
    return waiting, later


def signal_takers(state: ExecutionState, ir: WorkflowIR, seq: int) -> SignalTakers:
    """Which ``await`` step takes the signal recorded at ``seq`` in ``state``.

    Raises:
        LookupError: ``state`` holds no signal recorded at ``seq``.
    """
    signals = state.signals
    position = bisect_left(signals, seq, key=lambda signal: signal.seq)
    if position == len(signals) or signals[position].seq != seq:
        raise LookupError(f"no signal was recorded at seq {seq}")
    signal = signals[position]
    if signal.taken_by is not None:
        return SignalTakers("already", (parse_unit(signal.taken_by).step,))
    waiting, later = _awaits(state, ir, signal.name)
    room = len(waiting) + len(later)
    # The untaken signals of its name before it go first; past ``room`` the count no
    # longer matters, so a long backlog is not walked.
    queue = state.index.queues[signal.name]
    ahead = 0
    for index in range(queue.head, bisect_left(queue.positions, position)):
        if ahead >= room:
            break
        if signals[queue.positions[index]].taken_by is None:
            ahead += 1
    if ahead < len(waiting):
        return SignalTakers("now", tuple(waiting))
    if ahead < room:
        return SignalTakers("later", tuple(later))
    return SignalTakers("never", ())
