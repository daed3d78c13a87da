"""The console's drawings: the timeline of a history and the graph of a definition's steps.

Pure: histories are built from the real event models (and one is produced by the
simulated decider), the graphs from compiled YAML; every drawing is parsed as XML.
"""

from __future__ import annotations

import xml.etree.ElementTree as ET
from collections import Counter
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from orbit_model.compiler import compile_definition
from orbit_model.events import (
    Event,
    RetryScheduled,
    SignalReceived,
    StepAttemptFailed,
    StepCancelled,
    StepDispatched,
    StepFanOut,
    StepScheduled,
    StepSkipped,
    StepSucceeded,
    TaskFailure,
    TimerFired,
    TimerStarted,
    WorkflowCompleted,
    WorkflowCreated,
    WorkflowStarted,
)
from orbit_model.ir import WorkflowIR
from orbit_model.state import UnitStatus, replay
from orbit_model.views import StepView, steps_view
from orbit_services.gateway.console.graph import step_graph
from orbit_services.gateway.console.palette import (
    BAR_COLOURS,
    STATUS_COLOURS,
    TEXT_ON_FILL,
    status_colour,
)
from orbit_services.gateway.console.timeline import timeline_svg

from .decider.simulator import Fail, Simulator

SVG = "{http://www.w3.org/2000/svg}"
EXAMPLES = Path(__file__).parents[2] / "examples"
T0 = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
HEAD = """\
orbit: 1
workflow: drawn
version: 1.0.0
input: {type: object}
tasks:
  t: {version: "1"}
"""


def _ir(steps: str, final: str = "", head: str = "") -> WorkflowIR:
    return compile_definition(HEAD + head + "steps:\n" + steps + final).ir


def graph_svg(ir: WorkflowIR, steps: Mapping[str, StepView | dict[str, Any]]) -> str:
    """The graph of ``ir`` over ``steps``: views, or a view's fields of interest (the
    others a pending task's)."""
    return step_graph(ir.definition_hash(), ir, {k: _view(v) for k, v in steps.items()})


def _view(step: StepView | dict[str, Any]) -> StepView:
    if isinstance(step, StepView):
        return step
    pending = {"status": "pending", "attempt": 0, "output": None, "error": None}
    return StepView(**(pending | {"kind": "task", "waiting_for": None} | step))


RETRIED = _ir("  - id: charge\n    task: t\n    retry: {max_attempts: 3}\n")
FANNED = _ir('  - id: ship\n    for: "${ [1, 2, 3, 4, 5] }"\n    task: t\n    input: ${ item }\n')
SLEEPY = _ir("  - id: nap\n    sleep: 5s\n")
WAITING = _ir(
    "  - id: approval\n    await: approval\n    timeout: 1h\n", head="signals:\n  approval: {}\n"
)
PARENT = _ir("  - id: invoice\n    workflow: send-invoice@1.0.0\n")


def _start(ir: WorkflowIR) -> list[Event]:
    created = WorkflowCreated(
        execution_id="e-1", workflow=ir.name, version=ir.version, definition_hash="sha256:x"
    )
    return [created, WorkflowStarted()]


def _dispatch(unit: str, attempt: int = 1) -> StepDispatched:
    return StepDispatched(unit=unit, attempt=attempt, token=f"e-1:{unit}:{attempt}")


def _history(timed: Sequence[tuple[float, Event]]) -> list[dict[str, Any]]:
    """The API's history of these events, each recorded ``seconds`` after T0."""
    return [
        {
            "seq": seq,
            "recorded_at": (T0 + timedelta(seconds=seconds)).isoformat(),
            "type": event.type,
            "data": event.model_dump(mode="json", exclude={"type"}),
        }
        for seq, (seconds, event) in enumerate(timed, start=1)
    ]


def _parse(svg: str) -> ET.Element:
    root = ET.fromstring(svg)
    assert root.tag == f"{SVG}svg"
    title_id = root.get("aria-labelledby")
    assert root.get("role") == "img"
    assert title_id
    assert [t.get("id") for t in root.iter(f"{SVG}title") if t.get("id")] == [title_id]
    assert root.get("viewBox")
    assert root.get("width")
    assert root.get("height")
    return root


def _bars(root: ET.Element) -> list[ET.Element]:
    return [r for r in root.iter(f"{SVG}rect") if "bar" in (r.get("class") or "").split()]


def _kinds(root: ET.Element) -> Counter[str]:
    return Counter(bar.get("data-kind", "") for bar in _bars(root))


def _marks(root: ET.Element) -> list[ET.Element]:
    return [p for p in root.iter(f"{SVG}path") if p.get("class") == "failure-mark"]


def _x(bar: ET.Element) -> tuple[float, float]:
    x = float(bar.get("x", "0"))
    return x, x + float(bar.get("width", "0"))


def _tooltip(element: ET.Element) -> str:
    title = element.find(f"{SVG}title")
    assert title is not None
    return title.text or ""


# -- the palette -------------------------------------------------------------------


def _luminance(colour: str) -> float:
    def channel(value: int) -> float:
        c = value / 255
        return c / 12.92 if c <= 0.03928 else ((c + 0.055) / 1.055) ** 2.4

    r, g, b = (int(colour[i : i + 2], 16) for i in (1, 3, 5))
    return 0.2126 * channel(r) + 0.7152 * channel(g) + 0.0722 * channel(b)


def _contrast(one: str, other: str) -> float:
    light, dark = sorted((_luminance(one), _luminance(other)), reverse=True)
    return (light + 0.05) / (dark + 0.05)


def test_every_status_has_a_colour_that_white_text_reads_on() -> None:
    assert set(STATUS_COLOURS) == {status.value for status in UnitStatus}
    for status, colour in STATUS_COLOURS.items():
        assert _contrast(colour, TEXT_ON_FILL) >= 4.5, status
    assert _contrast(status_colour("from-a-newer-server"), TEXT_ON_FILL) >= 4.5


def test_every_bar_kind_has_a_colour() -> None:
    kinds = {"succeeded", "failed", "running", "uncertain"}
    expected = {f"attempt-{k}" for k in kinds} | {"retry-wait", "sleep", "await", "child"}
    assert expected <= set(BAR_COLOURS)
    assert all(colour.startswith("#") and len(colour) == 7 for colour in BAR_COLOURS.values())
    assert status_colour("failed") == STATUS_COLOURS["failed"]
    assert status_colour("nonsense") not in STATUS_COLOURS.values()


# -- the timeline ----------------------------------------------------------------------

DECLINED = TaskFailure(code="DECLINED", message='card <declined> & "co"')


def _retried() -> list[dict[str, Any]]:
    return _history(
        [
            (0, _start(RETRIED)[0]),
            (0, _start(RETRIED)[1]),
            (0.1, StepScheduled(unit="charge")),
            (0.2, _dispatch("charge")),
            (1.0, StepAttemptFailed(unit="charge", attempt=1, error=DECLINED)),
            (1.0, RetryScheduled(unit="charge", next_attempt=2, due_at=1)),
            (2.0, TimerFired(key="retry:charge")),
            (2.0, _dispatch("charge", 2)),
            (2.5, StepSucceeded(unit="charge", attempt=2)),
            (2.5, WorkflowCompleted()),
        ]
    )


def test_a_retried_task_has_a_failed_attempt_a_wait_and_a_success() -> None:
    root = _parse(timeline_svg(_retried(), RETRIED))
    assert root.get("class") == "timeline"
    assert _kinds(root) == {"attempt-failed": 1, "retry-wait": 1, "attempt-succeeded": 1}
    failed, wait, succeeded = _bars(root)
    assert [b.get("data-attempt") for b in (failed, wait, succeeded)] == ["1", "2", "2"]
    assert _x(failed)[1] <= _x(wait)[0] + 0.5
    assert _x(wait)[1] <= _x(succeeded)[0] + 0.5
    for bar in (failed, wait, succeeded):
        assert bar.get("data-unit") == "charge"
        assert bar.get("fill") == BAR_COLOURS[bar.get("data-kind", "")]
        assert f"bar-{bar.get('data-kind')}" in (bar.get("class") or "")
    (mark,) = _marks(root)
    assert mark.get("data-unit") == "charge"
    assert "attempt 1" in _tooltip(failed)


def test_an_error_message_is_escaped_in_its_tooltip() -> None:
    svg = timeline_svg(_retried(), RETRIED)
    assert "<declined>" not in svg
    assert "&lt;declined&gt; &amp; &quot;co&quot;" in svg
    failed = _bars(_parse(svg))[0]
    assert 'DECLINED: card <declined> & "co"' in _tooltip(failed)


def _fan_out(done: int) -> list[Event]:
    events: list[Event] = [*_start(FANNED), StepFanOut(unit="ship", items=[1, 2, 3, 4, 5])]
    for index in range(5):
        events += [StepScheduled(unit=f"ship[{index}]", input=index), _dispatch(f"ship[{index}]")]
    events += [StepSucceeded(unit=f"ship[{i}]", attempt=1) for i in range(done)]
    if done == 5:
        events += [StepSucceeded(unit="ship", output=[None] * 5), WorkflowCompleted()]
    return events


def test_a_fan_out_has_a_row_per_element() -> None:
    events = _fan_out(5)
    root = _parse(timeline_svg(_history([(i * 0.1, e) for i, e in enumerate(events)]), FANNED))
    rows = [g.get("data-unit") for g in root.iter(f"{SVG}g") if g.get("class") == "row"]
    assert rows == ["ship", *(f"ship[{i}]" for i in range(5))]
    assert _kinds(root) == {"attempt-succeeded": 5}
    assert sorted(b.get("data-unit", "") for b in _bars(root)) == [f"ship[{i}]" for i in range(5)]


def test_a_fan_out_part_way_has_running_attempts_up_to_now() -> None:
    history = _history([(i * 0.1, e) for i, e in enumerate(_fan_out(2))])
    now = T0 + timedelta(seconds=10)
    root = _parse(timeline_svg(history, FANNED, now))
    assert _kinds(root) == {"attempt-succeeded": 2, "attempt-running": 3}
    running = [b for b in _bars(root) if b.get("data-kind") == "attempt-running"]
    ends = {round(_x(bar)[1]) for bar in running}
    assert len(ends) == 1
    assert ends.pop() >= max(round(_x(bar)[1]) for bar in _bars(root))
    assert "still open" in _tooltip(running[0])


def test_a_sleep_is_one_bar_from_its_timer_to_its_firing() -> None:
    history = _history(
        [
            (0, _start(SLEEPY)[0]),
            (0, StepScheduled(unit="nap")),
            (0, TimerStarted(unit="nap", due_at=5000)),
            (5, TimerFired(key="timer:nap")),
            (5, StepSucceeded(unit="nap")),
            (10, WorkflowCompleted()),
        ]
    )
    root = _parse(timeline_svg(history, SLEEPY))
    assert _kinds(root) == {"sleep": 1}
    (bar,) = _bars(root)
    start, end = _x(bar)
    label_edge = float(next(iter(root.iter(f"{SVG}line"))).get("x1", "0"))
    # Half of the axis (5 s of 10).
    axis_end = max(float(line.get("x1", "0")) for line in root.iter(f"{SVG}line"))
    assert start == label_edge
    assert abs((end - start) - (axis_end - start) / 2) < 2
    assert bar.get("fill") == BAR_COLOURS["sleep"]
    assert "5s" in _tooltip(bar)


def test_an_await_waits_until_its_signal_and_its_timeout_is_no_sleep() -> None:
    history = _history(
        [
            (0, _start(WAITING)[0]),
            (0, StepScheduled(unit="approval")),
            (0, TimerStarted(unit="approval", due_at=3_600_000)),
            (3, SignalReceived(name="approval", payload={"ok": True})),
            (3, StepSucceeded(unit="approval", output={"ok": True}, signal=0)),
            (3, WorkflowCompleted()),
        ]
    )
    root = _parse(timeline_svg(history, WAITING))
    assert _kinds(root) == {"await": 1}
    (bar,) = _bars(root)
    assert bar.get("data-outcome") == "succeeded"
    assert "took signal #0" in _tooltip(bar)


def test_a_child_workflow_step_is_a_child_bar() -> None:
    events = [*_start(PARENT), StepScheduled(unit="invoice"), _dispatch("invoice")]
    open_history = _history([(i, e) for i, e in enumerate(events)])
    now = T0 + timedelta(seconds=30)
    root = _parse(timeline_svg(open_history, PARENT, now))
    assert _kinds(root) == {"child": 1}
    assert _bars(root)[0].get("data-outcome") == "running"
    done = [*events, StepSucceeded(unit="invoice", attempt=1), WorkflowCompleted()]
    root = _parse(timeline_svg(_history([(i, e) for i, e in enumerate(done)]), PARENT, now))
    assert _kinds(root) == {"child": 1}
    assert _bars(root)[0].get("data-outcome") == "succeeded"
    assert _bars(root)[0].get("fill") == BAR_COLOURS["child"]


def test_instant_bars_stay_visible_and_cancelled_and_skipped_units_are_drawn() -> None:
    ir = _ir("  - id: a\n    task: t\n  - id: b\n    task: t\n    after: []\n")
    history = _history(
        [
            (0, _start(ir)[0]),
            (0, StepScheduled(unit="a")),
            (0, _dispatch("a")),
            (0, StepSucceeded(unit="a", attempt=1)),
            (0, StepSkipped(unit="b", reason="its if was false")),
            (60, StepCancelled(unit="a")),
        ]
    )
    root = _parse(timeline_svg(history, ir))
    assert all(float(bar.get("width", "0")) >= 2 for bar in _bars(root))
    labels = [t for t in root.iter(f"{SVG}text") if t.get("class") == "row-label"]
    assert "skipped: its if was false" in _tooltip(labels[1])


def test_an_empty_or_undecodable_history_says_no_events() -> None:
    undecodable = {"seq": 1, "recorded_at": T0.isoformat(), "type": "StepScheduled"}
    for history in ([], [{**undecodable, "data": {}, "raw": "{", "error": {"code": "X"}}]):
        root = _parse(timeline_svg(history, RETRIED))
        assert not _bars(root)
        assert "no events" in ET.tostring(root, encoding="unicode")


class _Clocked(Simulator):
    """The simulator, noting the virtual time of every event (its ``recorded_at``)."""

    def append(self, events: list[Event]) -> None:
        super().append(events)
        self.__dict__.setdefault("times", []).extend([self.now] * len(events))


def test_a_simulated_order_draws_every_kind_of_bar() -> None:
    declined = iter([True])

    def charge(_input: Any, _delivery: Any) -> Any:
        if next(declined, False):
            raise Fail("DECLINED", "card <declined>")
        return {"amount": 42}

    workers = {
        "reserve-stock": lambda _i, _d: {"id": "r-1"},
        "charge-card": charge,
        "ship-item": lambda _i, _d: {},
        "workflow:send-invoice": lambda _i, _d: {"invoice_id": "inv-1"},
        "orbit.http.request": lambda _i, _d: {"status": 204},
        "release-lock": lambda _i, _d: {},
    }
    sim = _Clocked.from_yaml((EXAMPLES / "order-fulfilment.yaml").read_text(), workers)
    sim.start({"order_id": "o-1", "items": [{}, {}], "callback_url": "https://x.test"})
    sim.work()
    sim.now += 1500
    sim.signal("approval", {"approved": True})
    assert sim.run().status == "completed"
    times: list[int] = sim.__dict__["times"]
    timed = zip(times, sim.history, strict=True)
    history = _history([((t - times[0]) / 1000, e) for t, e in timed])
    root = _parse(timeline_svg(history, sim.definition))
    assert _kinds(root) == {
        "attempt-succeeded": 6,  # reserve, charge's 2nd, ship[0], ship[1], webhook, unlock
        "attempt-failed": 1,
        "retry-wait": 1,
        "await": 1,
        "sleep": 1,
        "child": 1,
    }
    assert len(_marks(root)) == 1
    rows = [g.get("data-unit") for g in root.iter(f"{SVG}g") if g.get("class") == "row"]
    assert rows[-1] == "finally:unlock"


# -- the step graph ------------------------------------------------------------------------


def _nodes(root: ET.Element) -> dict[str, ET.Element]:
    return {g.get("data-step", ""): g for g in root.iter(f"{SVG}g") if g.get("class") == "node"}


def _edges(root: ET.Element) -> list[tuple[str, str]]:
    return [
        (p.get("data-from", ""), p.get("data-to", ""))
        for p in root.iter(f"{SVG}path")
        if p.get("class") == "edge"
    ]


def _box(node: ET.Element) -> tuple[float, float, float, float]:
    rect = node.find(f"{SVG}rect")
    assert rect is not None
    x, y = float(rect.get("x", "0")), float(rect.get("y", "0"))
    return x, y, x + float(rect.get("width", "0")), y + float(rect.get("height", "0"))


def _fanout(node: ET.Element) -> str:
    texts = [t.text for t in node.iter(f"{SVG}text") if t.get("class") == "fanout"]
    assert len(texts) == 1
    return texts[0] or ""


def test_the_graph_has_a_node_per_step_and_an_edge_per_dependency() -> None:
    ir = compile_definition((EXAMPLES / "order-fulfilment.yaml").read_text()).ir
    root = _parse(graph_svg(ir, {}))
    assert root.get("class") == "step-graph"
    nodes = _nodes(root)
    assert list(nodes) == [s.id for s in (*ir.steps, *ir.finally_steps)]
    expected = [(d, s.id) for s in (*ir.steps, *ir.finally_steps) for d in s.after]
    assert sorted(_edges(root)) == sorted(expected)
    for source, target in expected:
        assert _box(nodes[source])[2] < _box(nodes[target])[0]
        assert int(nodes[source].get("data-layer", "")) < int(nodes[target].get("data-layer", ""))
    unlock = _box(nodes["unlock"])[0]
    assert all(_box(nodes[s.id])[2] < unlock for s in ir.steps)
    assert {node.get("data-status") for node in nodes.values()} == {"pending"}


def test_each_node_is_filled_with_its_status_colour() -> None:
    ir = _ir("".join(f"  - id: s{i}\n    task: t\n" for i in range(len(UnitStatus) + 1)))
    statuses = [status.value for status in UnitStatus] + ["from-the-future"]
    steps = {f"s{i}": {"status": status} for i, status in enumerate(statuses)}
    for step, node in _nodes(_parse(graph_svg(ir, steps))).items():
        rect = node.find(f"{SVG}rect")
        assert rect is not None
        assert node.get("data-status") == steps[step]["status"]
        assert rect.get("fill") == status_colour(steps[step]["status"])


def test_a_fan_out_node_counts_its_done_elements() -> None:
    events = _fan_out(2)
    views = [
        ({}, "0/?"),
        (steps_view(replay(events[:2]), FANNED), "0/?"),
        (steps_view(replay(events), FANNED), "2/5"),
        (steps_view(replay(_fan_out(5)), FANNED), "5/5"),
        ({"ship": {"status": "failed", "elements": {"failed": 1, "cancelled": 4}}}, "5/5"),
    ]
    for steps, shown in views:
        node = _nodes(_parse(graph_svg(FANNED, steps)))["ship"]
        assert _fanout(node) == shown, steps
        assert shown in _tooltip(node)


def test_the_graph_escapes_what_it_shows() -> None:
    error = {"code": "X", "message": "a <b> & c"}
    svg = graph_svg(RETRIED, {"charge": {"status": "failed", "attempt": 3, "error": error}})
    assert "<b>" not in svg
    node = _nodes(_parse(svg))["charge"]
    assert "X: a <b> & c" in _tooltip(node)
    assert "attempt 3" in _tooltip(node)


@st.composite
def _dags(draw: st.DrawFn) -> tuple[list[list[int]], list[list[int]]]:
    """Random ``after`` lists: each step may name any of those before it."""

    def afters(count: int) -> list[list[int]]:
        return [
            draw(st.lists(st.integers(0, i - 1), max_size=3, unique=True)) if i else []
            for i in range(count)
        ]

    return afters(draw(st.integers(1, 9))), afters(draw(st.integers(0, 3)))


def _dag_yaml(main: list[list[int]], final: list[list[int]]) -> WorkflowIR:
    def steps(prefix: str, afters: list[list[int]]) -> str:
        return "".join(
            f"  - id: {prefix}{i}\n    task: t\n    after: [{', '.join(names)}]\n"
            for i, names in enumerate([f"{prefix}{a}" for a in after] for after in afters)
        )

    return _ir(steps("s", main), "finally:\n" + steps("f", final) if final else "")


Point = tuple[float, float]


def _cubic(t: float, p0: Point, p1: Point, p2: Point, p3: Point) -> Point:
    u = 1 - t
    x, y = (
        u**3 * a + 3 * u * u * t * b + 3 * u * t * t * c + t**3 * d
        for a, b, c, d in zip(p0, p1, p2, p3, strict=True)
    )
    return x, y


def _samples(path: str) -> list[Point]:
    """Points along an edge's path: its ``M``, then cubic ``C`` and straight ``L`` parts."""
    tokens = path.split()
    points = [_point(token.lstrip("MCL")) for token in tokens]
    samples, at, index = [], points[0], 1
    while index < len(tokens):
        if tokens[index].startswith("C"):
            c1, c2, end = points[index : index + 3]
            index += 3
        else:  # a line is a cubic with its controls at its ends
            c1, c2, end = at, points[index], points[index]
            index += 1
        samples += [_cubic(i / 10, at, c1, c2, end) for i in range(1, 10)]
        at = end
    return samples


def _point(text: str) -> Point:
    x, y = text.split(",")
    return float(x), float(y)


def _overlap(one: tuple[float, ...], other: tuple[float, ...]) -> bool:
    return one[0] < other[2] and other[0] < one[2] and one[1] < other[3] and other[1] < one[3]


@settings(max_examples=60, deadline=None)
@given(_dags())
def test_edges_go_to_later_layers_and_nodes_never_overlap(
    dag: tuple[list[list[int]], list[list[int]]],
) -> None:
    ir = _dag_yaml(*dag)
    root = _parse(graph_svg(ir, {}))
    nodes = _nodes(root)
    assert len(nodes) == len(ir.steps) + len(ir.finally_steps)
    edges = _edges(root)
    assert len(edges) == sum(len(s.after) for s in (*ir.steps, *ir.finally_steps))
    for source, target in edges:
        assert int(nodes[source].get("data-layer", "")) < int(nodes[target].get("data-layer", ""))
        assert _box(nodes[source])[2] < _box(nodes[target])[0]
    boxes = [_box(node) for node in nodes.values()]
    # A long edge crosses the layers between its ends in a lane of its own, not a box.
    paths = [p.get("d", "") for p in root.iter(f"{SVG}path") if p.get("class") == "edge"]
    for x, y in (point for path in paths for point in _samples(path)):
        assert not any(b[0] < x < b[2] and b[1] < y < b[3] for b in boxes), (x, y)
    for i, one in enumerate(boxes):
        assert not any(_overlap(one, other) for other in boxes[i + 1 :])
    view_box = [float(v) for v in (root.get("viewBox") or "").split()]
    assert all(min(b) >= 0 and b[2] <= view_box[2] and b[3] <= view_box[3] for b in boxes)
