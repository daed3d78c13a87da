"""An execution's history as a Gantt chart: one row per unit, one bar per span of time.

Drawn on the server as an SVG string, from the history the API gives (``GET
/v1/executions/{id}/history``), so that the page needs no script to show it
and a test can read it as XML. Pure: no clock (``now`` is an argument), no store.

What is drawn comes from what the events say a unit did (:mod:`orbit_model.state`
folds the same events): an attempt runs from its ``StepDispatched`` to its result;
a retry waits from ``RetryScheduled`` to the next dispatch; a ``sleep`` waits
from ``TimerStarted`` to its ``TimerFired`` (key ``timer:UNIT``); an ``await``
waits from ``StepScheduled`` to the ``StepSucceeded`` that took its signal (its
own ``TimerStarted`` is its timeout, not a wait of its own). The IR says which
step kind a unit is; every text in the drawing is the user's data, so escaped.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from html import escape
from typing import Any

from orbit_model.events import TERMINAL_EVENTS
from orbit_model.ir import AwaitStep, CallStep, SleepStep, WorkflowIR
from orbit_model.timer_keys import MalformedTimerKey, TimerKey, TimerKind
from orbit_model.units import parse_unit

from . import svg
from .palette import BAR_COLOURS, FAILURE_MARK, MUTED, TEXT

WIDTH = 960
ROW_HEIGHT = 22
BAR_HEIGHT = 14
AXIS_HEIGHT = 28
PADDING = 8
CHAR_WIDTH = 7
"""About the width of one character at the drawing's 12px: enough to size the labels."""
MIN_BAR = 2
"""Instant bars are still seen (and hovered)."""
MAX_ROWS = 300
"""Past this many units (a large fan-out) the rest are counted, not drawn: the page
would grow by thousands of rows, and the history lists them all anyway."""
MAX_SPANS = 2_000
"""The most bars (and the most failure marks) drawn: each shown row draws its last
``MAX_SPANS // rows`` of them, so a step retried 30,000 times is not a 26 MB drawing."""
MAX_NOTE = 300
"""How much of an error message a tooltip quotes."""
TITLE_ID = "timeline-title"

Step = CallStep | AwaitStep | SleepStep


@dataclass
class Bar:
    """A span of one unit's time: an attempt, a retry's wait, a sleep or an await."""

    unit: str
    slot: str
    """``attempt``, ``retry``, ``sleep`` or ``await``: what it is before it ends."""
    start: float
    end: float | None = None
    attempt: int | None = None
    outcome: str = "running"
    note: str = ""
    child: bool = False
    """An attempt of a ``workflow`` step: the child execution's run."""

    @property
    def kind(self) -> str:
        """The bar's ``data-kind``, a key of :data:`.palette.BAR_COLOURS`."""
        if self.slot != "attempt":
            return {"retry": "retry-wait"}.get(self.slot, self.slot)
        if self.child and self.outcome in ("running", "succeeded"):
            return "child"
        return f"attempt-{self.outcome}"


@dataclass(frozen=True)
class Mark:
    """A failure, at the moment it was recorded."""

    unit: str
    at: float
    event: str
    note: str


@dataclass
class Row:
    unit: str
    kind: str
    bars: list[Bar] = field(default_factory=list)
    marks: list[Mark] = field(default_factory=list)
    open: dict[str, Bar] = field(default_factory=dict)
    """The bars not yet ended, by slot."""
    span: list[float] = field(default_factory=list)
    """A ``for`` step's own record: from its fan-out to its outcome."""
    skipped: str | None = None


@dataclass(frozen=True)
class Entry:
    at: float
    """Epoch milliseconds of ``recorded_at``."""
    type: str
    data: Mapping[str, Any]


def _epoch_ms(value: datetime) -> float:
    moment = value if value.tzinfo is not None else value.replace(tzinfo=UTC)
    return moment.timestamp() * 1000


def _entries(history: Sequence[Mapping[str, Any]]) -> list[Entry]:
    """The decoded entries (an undecodable one has ``data == {}``: nothing to draw)."""
    entries = []
    for item in history:
        data = item.get("data")
        if not data or not isinstance(data, Mapping):
            continue
        moment = datetime.fromisoformat(str(item["recorded_at"]).replace("Z", "+00:00"))
        entries.append(Entry(_epoch_ms(moment), str(item.get("type", "")), data))
    return entries


def unit_kind(steps: Mapping[tuple[bool, str], Step], key: str) -> str:
    """``task``, ``http``, ``workflow``, ``await``, ``sleep`` or ``for`` (a fan-out's own
    record); ``unknown`` for a unit the definition has no step for. ``steps`` are by
    ``(finally?, id)``: one look-up per unit, not a pass over the steps."""
    parsed = parse_unit(key)
    if parsed.role == "compensate":
        return "task"
    step = steps.get((parsed.role == "finally", parsed.step))
    if step is None:
        return "unknown"
    if isinstance(step, CallStep) and step.for_each is not None and parsed.role == "step":
        return "for"
    return step.kind


class Gantt:
    """The rows, built by one pass over the entries, one method per event type."""

    def __init__(self, ir: WorkflowIR) -> None:
        self.steps = {(False, step.id): step for step in ir.steps}
        self.steps |= {(True, step.id): step for step in ir.finally_steps}
        self.rows: dict[str, Row] = {}
        self.closed = False

    def row(self, unit: str) -> Row:
        if unit not in self.rows:
            self.rows[unit] = Row(unit, unit_kind(self.steps, unit))
        return self.rows[unit]

    def feed(self, entry: Entry) -> None:
        if entry.type in TERMINAL_EVENTS:
            self.closed = True
        unit = entry.data.get("unit")
        handler = _HANDLERS.get(entry.type)
        if isinstance(unit, str) and handler is not None:
            handler(self, self.row(unit), entry)
        elif entry.type == "TimerFired":
            self.timer_fired(entry)

    @staticmethod
    def start(row: Row, slot: str, at: float, **details: Any) -> Bar:
        bar = Bar(row.unit, slot, at, child=row.kind == "workflow", **details)
        row.bars.append(bar)
        row.open[slot] = bar
        return bar

    @staticmethod
    def end(row: Row, slot: str, at: float, outcome: str, note: str = "") -> None:
        bar = row.open.pop(slot, None)
        if bar is not None:
            bar.end, bar.outcome = at, outcome
            bar.note = " · ".join(part for part in (bar.note, note) if part)

    def end_all(self, row: Row, at: float, outcome: str, note: str = "") -> None:
        for slot in list(row.open):
            self.end(row, slot, at, outcome, note)
        if len(row.span) == 1:
            row.span.append(at)

    @staticmethod
    def mark(row: Row, entry: Entry, note: str) -> None:
        row.marks.append(Mark(row.unit, entry.at, entry.type, note))

    # -- the events, one method each (see _HANDLERS) ------------------------

    def scheduled(self, row: Row, entry: Entry) -> None:
        if row.kind == "await":
            self.start(row, "await", entry.at)

    def fanned_out(self, row: Row, entry: Entry) -> None:
        row.span[:] = [entry.at]

    def dispatched(self, row: Row, entry: Entry) -> None:
        self.end(row, "retry", entry.at, "ended")
        self.end(row, "attempt", entry.at, "uncertain", "dispatched again")
        note = _REDELIVERY if entry.data.get("redelivery") else ""
        self.start(row, "attempt", entry.at, attempt=entry.data.get("attempt"), note=note)

    def succeeded(self, row: Row, entry: Entry) -> None:
        signal = entry.data.get("signal")
        note = "" if signal is None else f"took signal #{signal}"
        self.end_all(row, entry.at, "succeeded", note)

    def attempt_failed(self, row: Row, entry: Entry) -> None:
        note = _error_note(entry.data.get("error"))
        self.end(row, "attempt", entry.at, "failed", note)
        self.mark(row, entry, note)

    def attempt_uncertain(self, row: Row, entry: Entry) -> None:
        self.end(row, "attempt", entry.at, "uncertain", str(entry.data.get("reason", "")))

    def retry_scheduled(self, row: Row, entry: Entry) -> None:
        due = entry.data.get("due_at")
        note = f"due at {_clock(float(due))}" if isinstance(due, int | float) else ""
        self.start(row, "retry", entry.at, attempt=entry.data.get("next_attempt"), note=note)

    def failed(self, row: Row, entry: Entry) -> None:
        note = _error_note(entry.data.get("error"))
        self.end_all(row, entry.at, "failed", note)
        self.mark(row, entry, note)

    def skipped(self, row: Row, entry: Entry) -> None:
        row.skipped = str(entry.data.get("reason", ""))

    def cancelled(self, row: Row, entry: Entry) -> None:
        self.end_all(row, entry.at, "cancelled")

    def timer_started(self, row: Row, entry: Entry) -> None:
        # An await's timer is its timeout; only a sleep (or a unit of no known step,
        # since nothing else starts timers) waits on it.
        if row.kind in ("sleep", "unknown"):
            self.start(row, "sleep", entry.at)

    def timer_fired(self, entry: Entry) -> None:
        try:
            key = TimerKey.parse(str(entry.data.get("key", "")))
        except MalformedTimerKey:
            return
        if key.kind is TimerKind.TIMER and key.subject in self.rows:
            self.end(self.rows[key.subject], "sleep", entry.at, "fired")


_REDELIVERY = "a redelivery: the worker before may have run it"

_HANDLERS: dict[str, Callable[[Gantt, Row, Entry], None]] = {
    "StepScheduled": Gantt.scheduled,
    "StepFanOut": Gantt.fanned_out,
    "StepDispatched": Gantt.dispatched,
    "StepSucceeded": Gantt.succeeded,
    "StepAttemptFailed": Gantt.attempt_failed,
    "StepAttemptUncertain": Gantt.attempt_uncertain,
    "RetryScheduled": Gantt.retry_scheduled,
    "StepFailed": Gantt.failed,
    "StepSkipped": Gantt.skipped,
    "StepCancelled": Gantt.cancelled,
    "TimerStarted": Gantt.timer_started,
}
"""The events that draw on their unit's row (a stale result or a liveness check does not)."""


def _error_note(error: Any) -> str:
    if not isinstance(error, Mapping):
        return ""
    text = f"{error.get('code', '')}: {error.get('message', '')}"
    return text if len(text) <= MAX_NOTE else text[: MAX_NOTE - 1] + "…"


# -- time, in words ----------------------------------------------------------


def _clock(epoch_ms: float) -> str:
    """``14:02:10.123`` UTC, as everywhere in the console."""
    moment = datetime.fromtimestamp(epoch_ms / 1000, UTC)
    return moment.strftime("%H:%M:%S.") + f"{moment.microsecond // 1000:03d}"


def duration(ms: float) -> str:
    """``0s``, ``250ms``, ``1.2s``, ``45s``, ``2m30s``, ``1h05m``: short enough for an axis."""
    if ms <= 0:
        return "0s"
    if ms < 1000:
        return f"{ms:.0f}ms"
    seconds = ms / 1000
    if seconds < 10:
        return f"{seconds:.1f}".rstrip("0").rstrip(".") + "s"
    if seconds < 60:
        return f"{seconds:.0f}s"
    minutes, second = divmod(round(seconds), 60)
    if minutes < 60:
        return f"{minutes}m{second:02d}s" if second else f"{minutes}m"
    hours, minute = divmod(minutes, 60)
    return f"{hours}h{minute:02d}m"


def _tick_step(span: float) -> float:
    """The least step of 1, 2 or 5 times a power of ten (ms) that cuts ``span`` in 6 or fewer."""
    unit = 1.0
    while True:
        for factor in (1, 2, 5):
            if span / (unit * factor) <= 6:
                return unit * factor
        unit *= 10


# -- the drawing ---------------------------------------------------------------


@dataclass(frozen=True)
class Frame:
    """Where the drawing's time and rows are: the axis from ``origin`` to ``end``."""

    origin: float
    end: float
    label_width: int

    @property
    def plot_width(self) -> float:
        return WIDTH - self.label_width - 2 * PADDING

    def x(self, at: float) -> float:
        span = max(self.end - self.origin, 1.0)
        return round(self.label_width + PADDING + (at - self.origin) / span * self.plot_width, 1)

    def offset(self, at: float) -> str:
        return "+" + duration(at - self.origin)

    @staticmethod
    def y(index: int) -> float:
        return AXIS_HEIGHT + index * ROW_HEIGHT


def _axis(frame: Frame, height: float) -> str:
    step = _tick_step(frame.end - frame.origin)
    ticks = []
    at = frame.origin
    while at <= frame.end + 1e-6:
        x = frame.x(at)
        line = {"class": "tick", "x1": x, "x2": x, "y1": AXIS_HEIGHT - 4, "y2": height}
        ticks.append(svg.tag("line", {**line, "stroke": "#e0e0e0"}))
        label = {"class": "tick-label", "x": x, "y": AXIS_HEIGHT - 8, "text-anchor": "middle"}
        ticks.append(svg.tag("text", {**label, "fill": MUTED}, escape(frame.offset(at))))
        at += step
    return svg.tag("g", {"class": "axis"}, *ticks)


def _bar_title(bar: Bar, frame: Frame, end: float) -> str:
    kind = bar.kind.replace("-", " ")
    parts = [bar.unit, kind if bar.end is not None else f"{kind} (still open)"]
    if bar.attempt is not None:
        parts.append(f"attempt {bar.attempt}")
    parts.append(
        f"{frame.offset(bar.start)} → {frame.offset(end)} "
        f"({_clock(bar.start)} to {_clock(end)} UTC, {duration(end - bar.start)})"
    )
    if bar.note:
        parts.append(bar.note)
    return " · ".join(parts)


def _bar(bar: Bar, frame: Frame, index: int) -> str:
    end = frame.end if bar.end is None else bar.end
    x1, x2 = frame.x(bar.start), frame.x(end)
    width = max(x2 - x1, MIN_BAR)
    x1 = min(x1, frame.x(frame.end) - MIN_BAR) if width == MIN_BAR else x1
    kind = bar.kind
    colour = BAR_COLOURS.get(kind, MUTED)
    attributes: dict[str, object] = {
        "class": f"bar bar-{kind}",
        "data-unit": bar.unit,
        "data-kind": kind,
        "data-outcome": bar.outcome,
        "fill": colour,
        "x": x1,
        "y": frame.y(index) + (ROW_HEIGHT - BAR_HEIGHT) / 2,
        "width": round(width, 1),
        "height": BAR_HEIGHT,
        "rx": 2,
    }
    if bar.attempt is not None:
        attributes["data-attempt"] = bar.attempt
    if kind == "retry-wait":
        # A wait, not work: faint, with a dashed outline.
        attributes.update({"fill-opacity": 0.3, "stroke": colour, "stroke-dasharray": "3 2"})
    return svg.tag("rect", attributes, svg.title(_bar_title(bar, frame, end)))


def _mark(mark: Mark, frame: Frame, index: int) -> str:
    x, y, r = frame.x(mark.at), frame.y(index) + ROW_HEIGHT / 2, 5
    what = "step failed" if mark.event == "StepFailed" else "attempt failed"
    text = f"{mark.unit} · {what} at {frame.offset(mark.at)} ({_clock(mark.at)} UTC)"
    attributes = {
        "class": "failure-mark",
        "data-unit": mark.unit,
        "data-event": mark.event,
        "d": f"M{x},{y - r} L{x + r},{y} L{x},{y + r} L{x - r},{y} Z",
        "fill": FAILURE_MARK,
        "stroke": "#ffffff",
    }
    return svg.tag("path", attributes, svg.title(f"{text} · {mark.note}" if mark.note else text))


def _label(row: Row, frame: Frame, index: int, share: int) -> str:
    room = max((frame.label_width - PADDING) // CHAR_WIDTH, 4)
    shown = row.unit if len(row.unit) <= room else row.unit[: room - 1] + "…"
    about = f"{row.unit} ({row.kind})"
    if len(row.bars) > share:
        about += f", its first {len(row.bars) - share:,} spans not drawn"
    if row.skipped is not None:
        about += f", skipped: {row.skipped}"
    attributes = {"class": "row-label", "x": PADDING, "y": frame.y(index) + ROW_HEIGHT * 0.7}
    return svg.tag("text", {**attributes, "fill": TEXT}, svg.title(about), escape(shown))


def _row(row: Row, frame: Frame, index: int, share: int) -> Iterator[str]:
    if index % 2:
        background = {"class": "row-bg", "x": 0, "y": frame.y(index), "width": WIDTH}
        yield svg.tag("rect", {**background, "height": ROW_HEIGHT, "fill": "#f5f5f5"})
    yield _label(row, frame, index, share)
    if row.span:
        y = frame.y(index) + ROW_HEIGHT / 2
        end = row.span[-1] if len(row.span) > 1 else frame.end
        line = {"class": "span", "x1": frame.x(row.span[0]), "x2": frame.x(end), "y1": y, "y2": y}
        yield svg.tag("line", {**line, "stroke": MUTED, "stroke-dasharray": "1 3"})
    for bar in row.bars[-share:]:
        yield _bar(bar, frame, index)
    for mark in row.marks[-share:]:
        yield _mark(mark, frame, index)


def _svg(width: int, height: float, title: str, *body: str) -> str:
    return svg.drawing("timeline", TITLE_ID, (width, height), title, *body, font_size=12)


def _empty() -> str:
    text = {"x": PADDING, "y": 24, "fill": MUTED}
    return _svg(240, 40, "Timeline: no events", svg.tag("text", text, "no events"))


def timeline_svg(
    history: Sequence[Mapping[str, Any]], ir: WorkflowIR, now: datetime | None = None
) -> str:
    """The history as an SVG Gantt chart (see the module's docstring).

    ``now`` ends the axis of an execution still open (no ``WorkflowCompleted``,
    ``…Failed``, ``…Cancelled`` or ``…TimedOut``): its open bars run up to it.
    Without it they end at the last event.
    """
    entries = _entries(history)
    if not entries:
        return _empty()
    gantt = Gantt(ir)
    for entry in entries:
        gantt.feed(entry)
    origin, last = min(e.at for e in entries), max(e.at for e in entries)
    end = last if gantt.closed or now is None else max(last, _epoch_ms(now))
    rows = list(gantt.rows.values())
    shown, hidden = rows[:MAX_ROWS], len(rows) - MAX_ROWS
    longest = max((len(row.unit) for row in shown), default=4)
    frame = Frame(origin, end, min(max(longest * CHAR_WIDTH + 2 * PADDING, 80), 260))
    height = frame.y(len(shown)) + (ROW_HEIGHT if hidden > 0 else 0) + PADDING
    body = [_axis(frame, frame.y(len(shown)))]
    share = MAX_SPANS // max(len(shown), 1)
    for index, row in enumerate(shown):
        drawn = _row(row, frame, index, share)
        body.append(svg.tag("g", {"class": "row", "data-unit": row.unit}, *drawn))
    if hidden > 0:
        more = {"class": "more", "x": PADDING, "y": frame.y(len(shown)) + ROW_HEIGHT * 0.7}
        body.append(svg.tag("text", {**more, "fill": MUTED}, f"… and {hidden} more units"))
    title = (
        f"Timeline of {len(rows)} units over {duration(end - origin)}"
        f"{'' if gantt.closed else ', still running'}"
    )
    return _svg(WIDTH, height, title, *body)
