"""A workflow's steps as a graph: boxes coloured by status, arrows along ``after``.

Drawn on the server as an SVG string, like the timeline (:mod:`.timeline`), from
the definition and the operator view's ``steps`` (:func:`orbit_model.views.steps_view`),
on the layout :mod:`.graph_layout` makes and keeps per definition hash. Pure.

- ``finally`` steps come after the main ones, behind a dashed line.
- Each column is as wide as its widest label needs, so that a long chain of steps
  (order-fulfilment's eight layers) fits a 1,366 px window; the page shrinks a
  graph wider than its box down to :data:`MIN_SCALE`, and scrolls it beyond.
- A definition past the layout's bounds gets a table of its steps and what each
  comes after instead, saying why (:func:`step_graph`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from html import escape

from orbit_model.ir import AwaitStep, CallStep, SleepStep, WorkflowIR
from orbit_model.views import StepView

from . import svg
from .graph_layout import Layout, Node, TooBig, nodes_of, plan
from .palette import MUTED, TEXT_ON_FILL, status_colour

NODE_HEIGHT = 52
GAP_X = 32
GAP_Y = 18
MARGIN = 12
TOP = 28
"""Room above the nodes for the ``finally`` label."""
CHAR_WIDTH = 8.0
"""About the width of a character of the 13px bold id: enough to size the boxes."""
SMALL_CHAR_WIDTH = 6.5
"""… and of the 11px kind line."""
INSET = 8
MIN_NODE_WIDTH = 120
MAX_NODE_WIDTH = 220
MIN_SCALE = 0.85
"""How far the page may shrink a graph wider than its box (console.css): the ids stay at
11px; a wider graph scrolls in its box instead."""
WAYPOINT_HEIGHT = 12
"""The lane a long edge takes through a layer it crosses."""
TITLE_ID = "step-graph-title"
ARROW_ID = "step-graph-arrow"
AFTER_SHOWN = 12
"""How many of a step's ``after`` the table that stands in for a graph names."""
DONE = ("succeeded", "failed", "skipped", "cancelled")
"""The element statuses a fan-out's ``done`` counts (the resolved ones)."""


def _is_waypoint(key: str) -> bool:
    # A step id starts with a letter (orbit_model.names.IDENTIFIER): never a space.
    return key.startswith(" ")


@dataclass(frozen=True)
class Box:
    x: float
    y: float
    width: float
    height: float

    @property
    def middle(self) -> float:
        return self.y + self.height / 2


def _height(key: str) -> int:
    return WAYPOINT_HEIGHT if _is_waypoint(key) else NODE_HEIGHT


def _column_height(column: Sequence[str]) -> float:
    return sum(_height(key) for key in column) + GAP_Y * max(len(column) - 1, 0)


def _place(columns: Sequence[Sequence[str]], widths: Sequence[float]) -> dict[str, Box]:
    """Where each step and waypoint goes: a column per layer, each as wide as its widest
    label needs, centred on the tallest."""
    tallest = max((_column_height(column) for column in columns), default=0)
    boxes = {}
    x = float(MARGIN)
    for column, width in zip(columns, widths, strict=True):
        y = TOP + (tallest - _column_height(column)) / 2
        for key in column:
            boxes[key] = Box(x, y, width, _height(key))
            y += _height(key) + GAP_Y
        x += width + GAP_X
    return boxes


# -- the drawing -----------------------------------------------------------------


def _kind(step: CallStep | AwaitStep | SleepStep) -> str:
    """As the operator view says it (``for`` for a fan-out, :func:`.views.step_kind`)."""
    if isinstance(step, CallStep) and step.for_each is not None:
        return "for"
    return step.kind


def fanout_text(view: StepView | None) -> str:
    """``done/total`` of a fan-out's elements; ``0/?`` before it fans out."""
    if view is None or view.elements is None:
        return "0/?"
    counts = view.elements
    return f"{sum(counts.get(status, 0) for status in DONE)}/{sum(counts.values())}"


def _tooltip(node: Node, view: StepView | None, status: str) -> str:
    parts = [node.id, _kind(node.step) + (" (finally)" if node.final else ""), status]
    if view is not None and view.attempt:
        parts.append(f"attempt {view.attempt}")
    if _kind(node.step) == "for":
        parts.append(f"{fanout_text(view)} elements done")
    if view is not None and view.error is not None:
        parts.append(f"{view.error.get('code', '')}: {view.error.get('message', '')}")
    if view is not None and view.waiting_for is not None:
        parts.append(f"waiting for {view.waiting_for.kind}")
    if view is not None and view.compensation is not None:
        parts.append(f"compensation {view.compensation.status}")
    if node.after:
        parts.append("after " + ", ".join(node.after))
    return " · ".join(str(part) for part in parts)


@dataclass(frozen=True)
class Label:
    """What a node's box says: its id (and a fan-out's count) above, kind and status below."""

    status: str
    kind_line: str
    fanout: str

    @classmethod
    def of(cls, node: Node, view: StepView | None) -> Label:
        """A step's label; one the view lacks (``None``) is pending."""
        status = "pending" if view is None else view.status
        fanout = fanout_text(view) if _kind(node.step) == "for" else ""
        return cls(status, f"{_kind(node.step)} · {status}", fanout)

    def width(self, node: Node) -> float:
        """What the box needs to show it all (it may get less: see :func:`_shown`)."""
        top = (len(node.id) + (len(self.fanout) + 1 if self.fanout else 0)) * CHAR_WIDTH
        return max(top, len(self.kind_line) * SMALL_CHAR_WIDTH) + 2 * INSET


def _shown(text: str, width: float, char: float = CHAR_WIDTH) -> str:
    """``text``, cut with an ellipsis to what ``width`` holds (the tooltip has it all)."""
    room = max(int(width / char), 4)
    return text if len(text) <= room else text[: room - 1] + "…"


def _node(node: Node, box: Box, layer: int, view: StepView | None) -> str:
    label = Label.of(node, view)
    white = {"fill": TEXT_ON_FILL}
    inner = box.width - 2 * INSET
    # A fan-out's count sits at the end of the id's line: room for the id shrinks by it.
    room = inner - (len(label.fanout) + 1) * CHAR_WIDTH if label.fanout else inner
    parts = [
        svg.title(_tooltip(node, view, label.status)),
        svg.tag(
            "rect",
            {"x": box.x, "y": box.y, "width": box.width, "height": box.height, "rx": 6}
            | {"fill": status_colour(label.status)},
        ),
        svg.tag(
            "text",
            {"class": "step-id", "x": box.x + INSET, "y": box.y + 20, "font-weight": "bold"}
            | white,
            escape(_shown(node.id, room)),
        ),
        svg.tag(
            "text",
            {"class": "step-kind", "x": box.x + INSET, "y": box.y + 40, "font-size": 11} | white,
            escape(_shown(label.kind_line, inner, SMALL_CHAR_WIDTH)),
        ),
    ]
    if label.fanout:
        end = {"x": box.x + box.width - INSET, "y": box.y + 20, "text-anchor": "end"}
        parts.append(svg.tag("text", {"class": "fanout"} | end | white, escape(label.fanout)))
    attributes = {"class": "node", "data-step": node.id, "data-status": label.status}
    return svg.tag("g", attributes | {"data-layer": layer}, *parts)


def _curve(x1: float, y1: float, x2: float, y2: float) -> str:
    """A cubic from one point to the next, leaving and arriving level."""
    bend = (x2 - x1) / 2
    return f"C{x1 + bend},{y1} {x2 - bend},{y2} {x2},{y2}"


def _edge(source: str, target: str, waypoints: Sequence[str], boxes: Mapping[str, Box]) -> str:
    start, end = boxes[source], boxes[target]
    x, y = start.x + start.width, start.middle
    path = [f"M{x},{y}"]
    for waypoint in waypoints:
        lane = boxes[waypoint]
        path += [_curve(x, y, lane.x, lane.middle), f"L{lane.x + lane.width},{lane.middle}"]
        x, y = lane.x + lane.width, lane.middle
    path.append(_curve(x, y, end.x - 2, end.middle))
    attributes = {"class": "edge", "data-from": source, "data-to": target, "d": " ".join(path)}
    style = {"fill": "none", "stroke": MUTED, "stroke-width": 1.5}
    return svg.tag("path", attributes | style | {"marker-end": f"url(#{ARROW_ID})"})


def _defs() -> str:
    head = svg.tag("path", {"d": "M0,0 L10,5 L0,10 Z", "fill": MUTED})
    marker = {
        "id": ARROW_ID,
        "viewBox": "0 0 10 10",
        "refX": 9,
        "refY": 5,
        "markerWidth": 7,
        "markerHeight": 7,
        "orient": "auto",
    }
    return svg.tag("defs", {}, svg.tag("marker", marker, head))


def _finally_divider(nodes: Sequence[Node], boxes: Mapping[str, Box], height: float) -> str:
    """A dashed line before the first ``finally`` column, labelled: they run after all."""
    main = [boxes[n.id] for n in nodes if not n.final]
    final = [boxes[n.id] for n in nodes if n.final]
    if not main or not final:
        return ""
    x = min(box.x for box in final) - GAP_X / 2
    line = {"x1": x, "x2": x, "y1": 8, "y2": height - 4, "stroke": MUTED}
    text = {"class": "finally-label", "x": x + 6, "y": 18, "fill": MUTED, "font-size": 11}
    return svg.tag(
        "g",
        {"class": "finally"},
        svg.tag("line", line | {"stroke-dasharray": "4 3"}),
        svg.tag("text", text, "finally"),
    )


def _svg(width: float, height: float, title: str, *body: str) -> str:
    style = f"min-width: {round(width * MIN_SCALE)}px"
    return svg.drawing(
        "step-graph", TITLE_ID, (width, height), title, *body, font_size=13, style=style
    )


def step_graph(definition_hash: str, ir: WorkflowIR, steps: Mapping[str, StepView]) -> str:
    """The steps of ``ir`` as an SVG graph, each coloured by its status in ``steps``
    (the operator view's, by step id; a step it lacks is drawn pending); past the
    layout's bounds, a table of the steps instead, saying why."""
    planned = plan(definition_hash, ir)
    if isinstance(planned, TooBig):
        return _fallback(ir, planned, steps)
    return graph_svg(ir, planned, steps)


def graph_svg(ir: WorkflowIR, plan: Layout, steps: Mapping[str, StepView]) -> str:
    """The drawing of ``plan``, the layout of ``ir``'s steps."""
    nodes = plan.nodes
    if not nodes:
        return _svg(240, 40, f"Steps of {ir.name}: none")
    needed = {node.id: Label.of(node, steps.get(node.id)).width(node) for node in nodes}
    widths = [
        min(max([MIN_NODE_WIDTH, *(needed.get(key, 0) for key in column)]), MAX_NODE_WIDTH)
        for column in plan.columns
    ]
    boxes = _place(plan.columns, widths)
    count = len(plan.columns)
    total_width = 2 * MARGIN + sum(widths) + (count - 1) * GAP_X
    total_height = TOP + max(_column_height(column) for column in plan.columns) + MARGIN
    edges = [_edge(*pair, waypoints, boxes) for pair, waypoints in plan.chains.items()]
    drawn = [_node(n, boxes[n.id], plan.layer[n.id], steps.get(n.id)) for n in nodes]
    body = [_defs(), _finally_divider(nodes, boxes, total_height)]
    body += [svg.tag("g", {"class": "edges"}, *edges) if edges else ""]
    body += [svg.tag("g", {"class": "nodes"}, *drawn)]
    title = f"Steps of {ir.name}: {len(nodes)} steps in {count} layers"
    return _svg(total_width, total_height, title, *body)


def _fallback(ir: WorkflowIR, too_big: TooBig, steps: Mapping[str, StepView]) -> str:
    """A table of the steps, their kind, status (on an execution's page) and what each
    comes after (the first :data:`AFTER_SHOWN` of it), under why there is no graph."""
    head = ["Step", "Kind", *(["Status"] if steps else []), "After"]
    rows = []
    for node in nodes_of(ir):
        after = ", ".join(node.after[:AFTER_SHOWN])
        if len(node.after) > AFTER_SHOWN:
            after += f" and {len(node.after) - AFTER_SHOWN:,} more"
        view = steps.get(node.id)
        status = [view.status if view is not None else "pending"] if steps else []
        kind = _kind(node.step) + (" (finally)" if node.final else "")
        cells = [svg.tag("td", {}, escape(text)) for text in (kind, *status, after)]
        step = svg.tag("th", {"scope": "row"}, escape(node.id))
        rows.append(svg.tag("tr", {"data-step": node.id}, step, *cells))
    why = (
        f"The step graph is not drawn: {ir.name} has {too_big.why}."
        " Its steps, and what each comes after:"
    )
    header = svg.tag("tr", {}, *(svg.tag("th", {"scope": "col"}, text) for text in head))
    table = [svg.tag("thead", {}, header), svg.tag("tbody", {}, *rows)]
    return svg.tag("p", {"class": "graph-fallback"}, escape(why)) + svg.tag(
        "table", {"class": "steps step-after"}, *table
    )
