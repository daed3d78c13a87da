"""A workflow's steps as a graph: boxes coloured by status, arrows along ``after``.

Drawn on the server as an SVG string, like the timeline (:mod:`.timeline`), from
the definition and the operator view's ``steps`` (:func:`orbit_model.views.steps_view`).
Pure, and with its own small layout rather than a graph library: the graphs
are a definition's steps (tens, not thousands), and a layered drawing is a few
dozen lines (Sugiyama's scheme, without its crossing-free guarantees).

- A step's layer is the longest chain of ``after`` above it, so every arrow
  points right, into a later layer.
- ``finally`` steps run once every main step is done: their layers come after
  the main ones, behind a dashed line, and their ``after`` names only each other.
- Within a layer, a few barycenter sweeps (each node moved to the mean position
  of its neighbours) untangle most crossings.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from html import escape
from typing import Any

from orbit_model.ir import AwaitStep, CallStep, SleepStep, WorkflowIR

from .palette import MUTED, TEXT_ON_FILL, status_colour

NODE_HEIGHT = 52
GAP_X = 56
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
WAYPOINT_HEIGHT = 12
"""The lane a long edge takes through a layer it crosses."""
SWEEPS = 4
TITLE_ID = "step-graph-title"
ARROW_ID = "step-graph-arrow"
DONE = ("succeeded", "failed", "skipped", "cancelled")
"""The element statuses a fan-out's ``done`` counts (the resolved ones)."""


@dataclass(frozen=True)
class Node:
    id: str
    after: tuple[str, ...]
    step: CallStep | AwaitStep | SleepStep
    final: bool
    """A ``finally`` step."""


def _nodes(ir: WorkflowIR) -> list[Node]:
    """Every main and ``finally`` step, each ``after`` cut to steps of its own part."""
    main = {step.id for step in ir.steps}
    final = {step.id for step in ir.finally_steps}
    nodes = [Node(s.id, _known(s.after, main, s.id), s, False) for s in ir.steps]
    nodes += [Node(s.id, _known(s.after, final, s.id), s, True) for s in ir.finally_steps]
    return nodes


def _known(after: Iterable[str], ids: set[str], own: str) -> tuple[str, ...]:
    return tuple(d for d in dict.fromkeys(after) if d in ids and d != own)


def _longest_paths(nodes: Sequence[Node]) -> dict[str, int]:
    """Each node's layer: 0 for a root, else one more than its deepest dependency.

    Iterative (Kahn's order), so a deep chain cannot hit the recursion limit; a
    node on a cycle (a definition that was never checked) lands after the rest.
    """
    waiting = {node.id: len(node.after) for node in nodes}
    dependents: dict[str, list[str]] = {node.id: [] for node in nodes}
    for node in nodes:
        for dependency in node.after:
            dependents[dependency].append(node.id)
    layer = dict.fromkeys(waiting, 0)
    ready = [node.id for node in nodes if not node.after]
    while ready:
        current = ready.pop()
        for dependent in dependents[current]:
            layer[dependent] = max(layer[dependent], layer[current] + 1)
            waiting[dependent] -= 1
            if waiting[dependent] == 0:
                ready.append(dependent)
    deepest = max(layer.values(), default=0)
    return {key: deepest + 1 if waiting[key] else value for key, value in layer.items()}


def layers_of(nodes: Sequence[Node]) -> dict[str, int]:
    """Each node's layer (column), the ``finally`` steps' after every main step's."""
    main = [node for node in nodes if not node.final]
    layers = _longest_paths(main)
    offset = max(layers.values()) + 1 if layers else 0
    final = _longest_paths([node for node in nodes if node.final])
    layers.update({key: offset + value for key, value in final.items()})
    return layers


def _sweep(columns: list[list[str]], neighbours: Mapping[str, Sequence[str]], order: range) -> None:
    """Sort each column in ``order`` by its nodes' mean neighbour position (in place)."""
    position = {key: index for column in columns for index, key in enumerate(column)}
    for layer in order:
        column = columns[layer]

        def barycenter(key: str) -> tuple[float, int]:
            around = [position[n] for n in neighbours[key]]
            mean = sum(around) / len(around) if around else float(position[key])
            return mean, position[key]

        column.sort(key=barycenter)
        position.update({key: index for index, key in enumerate(column)})


def _is_waypoint(key: str) -> bool:
    # A step id starts with a letter (orbit_model.names.IDENTIFIER): never a space.
    return key.startswith(" ")


@dataclass(frozen=True)
class Layout:
    """The columns (layers) top to bottom, of steps and of the waypoints of long edges.

    An edge that crosses layers gets a waypoint in each, so that it runs in a lane
    of its own rather than through the boxes in its way, and the sweeps see it.
    """

    columns: list[list[str]]
    layer: dict[str, int]
    """Of each step and waypoint."""
    chains: dict[tuple[str, str], list[str]]
    """The waypoints of each edge ``(from, to)``, in order."""


def layout(nodes: Sequence[Node]) -> Layout:
    """Layers by longest path, waypoints on long edges, then barycenter sweeps down (by
    what comes before) and up (by what comes after), from the definition's order."""
    layer = layers_of(nodes)
    before: dict[str, list[str]] = {node.id: [] for node in nodes}
    after: dict[str, list[str]] = {node.id: [] for node in nodes}
    chains: dict[tuple[str, str], list[str]] = {}
    for node in nodes:
        for source in node.after:
            lanes = range(layer[source] + 1, layer[node.id])
            waypoints = [f" {source}>{node.id}@{lane}" for lane in lanes]
            chains[source, node.id] = waypoints
            layer.update(zip(waypoints, lanes, strict=True))
            path = [source, *waypoints, node.id]
            for first, second in itertools.pairwise(path):
                after.setdefault(first, []).append(second)
                before.setdefault(second, []).append(first)
    columns: list[list[str]] = [[] for _ in range(max(layer.values(), default=-1) + 1)]
    for key in [node.id for node in nodes] + [w for chain in chains.values() for w in chain]:
        columns[layer[key]].append(key)
    for _ in range(SWEEPS):
        _sweep(columns, before, range(1, len(columns)))
        _sweep(columns, after, range(len(columns) - 2, -1, -1))
    return Layout(columns, layer, chains)


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


def _place(columns: Sequence[Sequence[str]], width: float) -> dict[str, Box]:
    """Where each step and waypoint goes: a column per layer, centred on the tallest."""
    tallest = max((_column_height(column) for column in columns), default=0)
    boxes = {}
    for layer, column in enumerate(columns):
        x = MARGIN + layer * (width + GAP_X)
        y = TOP + (tallest - _column_height(column)) / 2
        for key in column:
            boxes[key] = Box(x, y, width, _height(key))
            y += _height(key) + GAP_Y
    return boxes


# -- the drawing -----------------------------------------------------------------


def _tag(name: str, attributes: Mapping[str, object], *children: str) -> str:
    attrs = "".join(f' {key}="{escape(str(value))}"' for key, value in attributes.items())
    if not children:
        return f"<{name}{attrs}/>"
    return f"<{name}{attrs}>{''.join(children)}</{name}>"


def _kind(step: CallStep | AwaitStep | SleepStep) -> str:
    """As the operator view says it (``for`` for a fan-out, :func:`.views.step_kind`)."""
    if isinstance(step, CallStep) and step.for_each is not None:
        return "for"
    return step.kind


def fanout_text(view: Mapping[str, Any]) -> str:
    """``done/total`` of a fan-out's elements; ``0/?`` before it fans out."""
    elements = view.get("elements")
    if not isinstance(elements, Mapping):
        return "0/?"
    counts = {status: int(count) for status, count in elements.items()}
    return f"{sum(counts.get(status, 0) for status in DONE)}/{sum(counts.values())}"


def _tooltip(node: Node, view: Mapping[str, Any], status: str) -> str:
    parts = [node.id, _kind(node.step) + (" (finally)" if node.final else ""), status]
    if view.get("attempt"):
        parts.append(f"attempt {view['attempt']}")
    if _kind(node.step) == "for":
        parts.append(f"{fanout_text(view)} elements done")
    error = view.get("error")
    if isinstance(error, Mapping):
        parts.append(f"{error.get('code', '')}: {error.get('message', '')}")
    wait = view.get("waiting_for")
    if isinstance(wait, Mapping) and wait.get("kind"):
        parts.append(f"waiting for {wait['kind']}")
    compensation = view.get("compensation")
    if isinstance(compensation, Mapping):
        parts.append(f"compensation {compensation.get('status', '')}")
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
    def of(cls, node: Node, view: Mapping[str, Any]) -> Label:
        status = str(view.get("status") or "pending")
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


def _node(node: Node, box: Box, layer: int, view: Mapping[str, Any]) -> str:
    label = Label.of(node, view)
    white = {"fill": TEXT_ON_FILL}
    inner = box.width - 2 * INSET
    # A fan-out's count sits at the end of the id's line: room for the id shrinks by it.
    room = inner - (len(label.fanout) + 1) * CHAR_WIDTH if label.fanout else inner
    parts = [
        f"<title>{escape(_tooltip(node, view, label.status))}</title>",
        _tag(
            "rect",
            {"x": box.x, "y": box.y, "width": box.width, "height": box.height, "rx": 6}
            | {"fill": status_colour(label.status)},
        ),
        _tag(
            "text",
            {"class": "step-id", "x": box.x + INSET, "y": box.y + 20, "font-weight": "bold"}
            | white,
            escape(_shown(node.id, room)),
        ),
        _tag(
            "text",
            {"class": "step-kind", "x": box.x + INSET, "y": box.y + 40, "font-size": 11} | white,
            escape(_shown(label.kind_line, inner, SMALL_CHAR_WIDTH)),
        ),
    ]
    if label.fanout:
        end = {"x": box.x + box.width - INSET, "y": box.y + 20, "text-anchor": "end"}
        parts.append(_tag("text", {"class": "fanout"} | end | white, escape(label.fanout)))
    attributes = {"class": "node", "data-step": node.id, "data-status": label.status}
    return _tag("g", attributes | {"data-layer": layer}, *parts)


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
    return _tag("path", attributes | style | {"marker-end": f"url(#{ARROW_ID})"})


def _defs() -> str:
    head = _tag("path", {"d": "M0,0 L10,5 L0,10 Z", "fill": MUTED})
    marker = {
        "id": ARROW_ID,
        "viewBox": "0 0 10 10",
        "refX": 9,
        "refY": 5,
        "markerWidth": 7,
        "markerHeight": 7,
        "orient": "auto",
    }
    return _tag("defs", {}, _tag("marker", marker, head))


def _finally_divider(nodes: Sequence[Node], boxes: Mapping[str, Box], height: float) -> str:
    """A dashed line before the first ``finally`` column, labelled: they run after all."""
    main = [boxes[n.id] for n in nodes if not n.final]
    final = [boxes[n.id] for n in nodes if n.final]
    if not main or not final:
        return ""
    x = min(box.x for box in final) - GAP_X / 2
    line = {"x1": x, "x2": x, "y1": 8, "y2": height - 4, "stroke": MUTED}
    text = {"class": "finally-label", "x": x + 6, "y": 18, "fill": MUTED, "font-size": 11}
    return _tag(
        "g",
        {"class": "finally"},
        _tag("line", line | {"stroke-dasharray": "4 3"}),
        _tag("text", text, "finally"),
    )


def _svg(width: float, height: float, title: str, *body: str) -> str:
    attributes = {
        "xmlns": "http://www.w3.org/2000/svg",
        "class": "step-graph",
        "role": "img",
        "aria-labelledby": TITLE_ID,
        "viewBox": f"0 0 {width} {height}",
        "width": width,
        "height": height,
        "font-family": "system-ui, sans-serif",
        "font-size": 13,
    }
    return _tag("svg", attributes, f'<title id="{TITLE_ID}">{escape(title)}</title>', *body)


def graph_svg(ir: WorkflowIR, steps: Mapping[str, Mapping[str, Any]]) -> str:
    """The steps of ``ir`` as an SVG graph, each coloured by its status in ``steps``
    (the operator view's, by step id; a step it lacks is drawn pending)."""
    nodes = _nodes(ir)
    if not nodes:
        return _svg(240, 40, f"Steps of {ir.name}: none")
    plan = layout(nodes)
    needed = max(Label.of(node, steps.get(node.id, {})).width(node) for node in nodes)
    width = min(max(needed, MIN_NODE_WIDTH), MAX_NODE_WIDTH)
    boxes = _place(plan.columns, width)
    count = len(plan.columns)
    total_width = 2 * MARGIN + count * width + (count - 1) * GAP_X
    total_height = TOP + max(_column_height(column) for column in plan.columns) + MARGIN
    edges = [_edge(*pair, waypoints, boxes) for pair, waypoints in plan.chains.items()]
    drawn = [_node(n, boxes[n.id], plan.layer[n.id], steps.get(n.id, {})) for n in nodes]
    body = [_defs(), _finally_divider(nodes, boxes, total_height)]
    body += [_tag("g", {"class": "edges"}, *edges) if edges else ""]
    body += [_tag("g", {"class": "nodes"}, *drawn)]
    title = f"Steps of {ir.name}: {len(nodes)} steps in {count} layers"
    return _svg(total_width, total_height, title, *body)
