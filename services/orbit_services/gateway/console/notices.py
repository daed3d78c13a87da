"""What the console says after an action, and which actions an execution still takes.

A signal's answer tells which ``await`` step takes it (:mod:`orbit_model.signal_takers`:
signals wait in a buffer until an ``await`` of their name takes one): the console
says it in words after a form sent by htmx, and, without JavaScript, on the page
the form redirects to (``?done=signal&signal=NAME&taken=…&step=…``).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Literal, get_args

from starlette.datastructures import QueryParams

from orbit_model.signal_takers import Taken

Controls = Literal["open", "stopping", "closed"]
"""What the page offers to send: the signal forms and the cancel button (``open``), or
a line saying why there is nothing left to send."""

CANCEL_REQUESTED = "Cancellation requested."
_STOPS = frozenset({"CancelRequested", "CompensationStarted"})
"""The events after which a running execution only stops: cancelled, or failed."""


def controls_of(status: str, history: Iterable[Mapping[str, Any]]) -> Controls:
    """``closed`` once it has ended; ``stopping`` once it was cancelled or failed and
    runs its compensations and cleanup (no ``await`` takes a signal then, and another
    cancel adds nothing); ``open`` otherwise."""
    if status != "running":
        return "closed"
    if any(event["type"] in _STOPS for event in history):
        return "stopping"
    return "open"


def _steps(steps: Sequence[str]) -> str:
    if not steps:
        return "an await step"
    if len(steps) == 1:
        return f"step {steps[0]}"
    return "steps " + ", ".join(steps[:-1]) + f" and {steps[-1]}"


def signal_notice(name: str, taken: Taken, steps: Sequence[str]) -> str:
    """What a sent signal became, in words."""
    if taken == "now":
        return f"Signal {name} sent: {_steps(steps)} waits for it and takes it."
    if taken == "later":
        return (
            f"Signal {name} sent. No step waits for it now: it is kept until"
            f" {_steps(steps)}, not reached yet, takes it."
        )
    if taken == "already":
        return f"Signal {name} was sent before with this request id: {_steps(steps)} took it."
    return (
        f"Signal {name} recorded, but no step will take it: no await step for {name}"
        f" is left to run. Only expressions that read signals.{name} see it."
    )


def signal_query(name: str, answer: Mapping[str, Any]) -> dict[str, Any]:
    """The query that tells the page redirected to what became of the signal."""
    return {"done": "signal", "signal": name, "taken": answer["taken"], "step": answer["steps"]}


def notice_of(query: QueryParams) -> str | None:
    """The notice of the action a redirect came back from (see :func:`signal_query`)."""
    done = query.get("done")
    if done == "cancel":
        return CANCEL_REQUESTED
    if done != "signal":
        return None
    taken = query.get("taken")
    for known in get_args(Taken):
        if taken == known:
            return signal_notice(query.get("signal", ""), known, query.getlist("step"))
    return "Signal sent."
