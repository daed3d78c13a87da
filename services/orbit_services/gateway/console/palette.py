"""The colours of the console's drawings: one per unit status, one per timeline bar.

One table, so that the step graph, the timeline and the pages' legends agree,
and so that tests can check a drawing's fills against it. Every status colour
carries white text (the graph writes step ids on it) at a contrast of at
least 4.5:1, the WCAG AA level the console's axe check holds the pages to;
``tests/unit/test_console_svg.py`` computes it.
"""

from __future__ import annotations

from orbit_model.state import UnitStatus

TEXT_ON_FILL = "#ffffff"
"""The colour of text drawn on any of :data:`STATUS_COLOURS`."""
TEXT = "#212121"
"""The colour of text drawn on the page's white (labels, the axis)."""
MUTED = "#555555"
"""Lines and secondary text on white (7.5:1, still readable as text)."""
FALLBACK = "#616161"
"""The fill of a status no table knows (a newer server's, say)."""

STATUS_COLOURS: dict[str, str] = {
    UnitStatus.PENDING.value: "#455a64",
    UnitStatus.SCHEDULED.value: "#00695c",
    UnitStatus.DISPATCHED.value: "#1565c0",
    UnitStatus.UNCERTAIN.value: "#8a5300",
    UnitStatus.RETRY_WAIT.value: "#bf360c",
    UnitStatus.SUCCEEDED.value: "#2e7d32",
    UnitStatus.FAILED.value: "#c62828",
    UnitStatus.SKIPPED.value: "#757575",
    UnitStatus.CANCELLED.value: "#6a1b9a",
}
"""Fill by :class:`~orbit_model.state.UnitStatus` value (``"retry_wait"``, …)."""

BAR_COLOURS: dict[str, str] = {
    "attempt-succeeded": STATUS_COLOURS["succeeded"],
    "attempt-failed": STATUS_COLOURS["failed"],
    "attempt-running": STATUS_COLOURS["dispatched"],
    "attempt-uncertain": STATUS_COLOURS["uncertain"],
    "attempt-cancelled": STATUS_COLOURS["cancelled"],
    "retry-wait": STATUS_COLOURS["retry_wait"],
    "sleep": "#546e7a",
    "await": "#00838f",
    "child": "#4527a0",
}
"""Fill by timeline bar kind (:func:`~.timeline.timeline_svg`'s ``data-kind``).

An attempt's colour is that of the status it ended in, so that a failed
attempt on the timeline and a failed step in the graph look alike."""

FAILURE_MARK = STATUS_COLOURS["failed"]
"""The fill of the timeline's marker at each failure."""


def status_colour(status: str) -> str:
    """The fill of a unit in ``status``; grey for one this console does not know."""
    return STATUS_COLOURS.get(status, FALLBACK)
