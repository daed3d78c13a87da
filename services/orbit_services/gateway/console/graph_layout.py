"""Where the step graph's boxes go (:mod:`.graph` draws them), within a bound of work.

Pure, and with its own small layout rather than a graph library: a layered drawing
is a few dozen lines (Sugiyama's scheme, without its crossing-free guarantees).

- A step's layer is the longest chain of ``after`` above it, so every arrow
  points right, into a later layer.
- ``finally`` steps run once every main step is done: their layers come after
  the main ones, and their ``after`` names only each other.
- An edge that crosses layers gets a waypoint in each (its lane), so that it runs
  beside the boxes in its way rather than through them.
- Within a layer, a few barycenter sweeps (each node moved to the mean position
  of its neighbours) untangle most crossings.

The waypoints grow with the cube of the steps when each step comes after every earlier
one (140 such steps: 9,730 edges, 447,580 waypoints, 23 s and a 31 MB drawing). So a
graph is laid out only within :data:`MAX_STEPS`, :data:`MAX_EDGES` and
:data:`MAX_LANES`, counted in linear time before any waypoint is made; past them
:func:`plan` says why, and the page lists the steps instead. The sweeps' work is then
at most ``2 * SWEEPS`` passes over ``MAX_STEPS + MAX_LANES`` keys and their
``MAX_EDGES + MAX_LANES`` segments. A layout is kept per definition hash
(:data:`CACHED` of them), since a running execution's page asks for it every second.
"""

from __future__ import annotations

import functools
import itertools
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from orbit_model.ir import AwaitStep, CallStep, SleepStep, WorkflowIR

SWEEPS = 4
MAX_STEPS = 150
"""The most steps (main and ``finally``) a graph shows."""
MAX_EDGES = 400
"""The most ``after`` edges a graph draws."""
MAX_LANES = 1_000
"""The most waypoints of long edges: the layers the edges cross, added up."""
CACHED = 64
"""Layouts kept, by definition hash; each is bounded by the limits above."""


@dataclass(frozen=True)
class Node:
    id: str
    after: tuple[str, ...]
    step: CallStep | AwaitStep | SleepStep
    final: bool
    """A ``finally`` step."""


def nodes_of(ir: WorkflowIR) -> list[Node]:
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


@dataclass(frozen=True)
class Layout:
    """The columns (layers) left to right, of steps and of the waypoints of long edges."""

    nodes: list[Node]
    columns: list[list[str]]
    layer: dict[str, int]
    """Of each step and waypoint."""
    chains: dict[tuple[str, str], list[str]]
    """The waypoints of each edge ``(from, to)``, in order."""


def layout(nodes: Sequence[Node], layers: Mapping[str, int]) -> Layout:
    """Waypoints on long edges, then barycenter sweeps down (by what comes before) and up
    (by what comes after), from the definition's order."""
    layer = dict(layers)
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
    return Layout(list(nodes), columns, layer, chains)


@dataclass(frozen=True)
class TooBig:
    """Why a definition's graph is not laid out (a sentence that follows "it has")."""

    why: str


def plan(definition_hash: str, ir: WorkflowIR) -> Layout | TooBig:
    """The layout of ``ir``'s steps, or why there is none; kept per definition hash."""
    return _planned(_Definition(definition_hash, ir))


@dataclass(frozen=True)
class _Definition:
    """The cache's key: the hash alone names the IR."""

    hash: str
    ir: WorkflowIR = field(compare=False)


@functools.lru_cache(maxsize=CACHED)
def _planned(definition: _Definition) -> Layout | TooBig:
    ir = definition.ir
    count = len(ir.steps) + len(ir.finally_steps)
    if count > MAX_STEPS:
        return TooBig(f"{count:,} steps, more than the {MAX_STEPS} a graph shows")
    nodes = nodes_of(ir)
    edges = sum(len(node.after) for node in nodes)
    if edges > MAX_EDGES:
        return TooBig(f"{edges:,} edges, more than the {MAX_EDGES} a graph draws")
    layers = layers_of(nodes)
    lanes = sum(max(layers[n.id] - layers[s] - 1, 0) for n in nodes for s in n.after)
    if lanes > MAX_LANES:
        return TooBig(f"edges that cross {lanes:,} columns, more than the {MAX_LANES} drawn")
    return layout(nodes, layers)
