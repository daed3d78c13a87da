"""The step graph's work is bounded: past :data:`MAX_STEPS`, :data:`MAX_EDGES` or
:data:`MAX_LANES` a definition gets a table of its steps instead, and within them the
layout's sweeps touch at most a fixed number of keys and segments (counted, not timed).

Each step of the dense definition comes after every earlier one: its edges grow with the
square of the steps and the waypoints of its long edges with the cube (140 steps: 9,730
edges, 447,580 waypoints; it took the gateway 23 s and a 31 MB drawing per page).
"""

from __future__ import annotations

import xml.etree.ElementTree as ET
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass

import pytest

from orbit_model.compiler import Definition, compile_definition
from orbit_model.views import StepView
from orbit_services.gateway.console import graph_layout
from orbit_services.gateway.console.graph import AFTER_SHOWN, step_graph
from orbit_services.gateway.console.graph_layout import (
    MAX_EDGES,
    MAX_LANES,
    MAX_STEPS,
    SWEEPS,
    Layout,
    TooBig,
    plan,
)

SVG = "{http://www.w3.org/2000/svg}"


def _step(status: str) -> StepView:
    """A task step's view in ``status``."""
    fields = {"attempt": 1, "output": None, "error": None, "kind": "task", "waiting_for": None}
    return StepView(status=status, **fields)


def definition(after: Sequence[Sequence[int]], name: str = "drawn") -> Definition:
    """Step ``i`` (``s0``, ``s1``, …) comes after the steps ``after[i]`` names."""
    lines = ["orbit: 1", f"workflow: {name}", "version: 1.0.0", "steps:"]
    for index, before in enumerate(after):
        lines += [f"  - id: s{index}", "    sleep: 1s"]
        lines.append("    after: [" + ", ".join(f"s{j}" for j in before) + "]")
    return compile_definition("\n".join(lines) + "\n")


def dense(steps: int) -> Definition:
    """Each step after every earlier one."""
    return definition([range(index) for index in range(steps)], "dense")


def chain(steps: int, reach: int = 0, long_edges: int = 0) -> Definition:
    """A chain, and ``long_edges`` more edges each reaching ``reach`` steps back (each
    crosses ``reach - 1`` columns)."""
    after = [[index - 1] if index else [] for index in range(steps)]
    for index in range(reach, min(steps, reach + long_edges)):
        after[index].append(index - reach)
    return definition(after)


@dataclass
class Work:
    keys: int = 0
    """Keys sorted by the sweeps."""
    segments: int = 0
    """Neighbours read by the sweeps."""
    layouts: int = 0


@pytest.fixture
def work(monkeypatch: pytest.MonkeyPatch) -> Iterator[Work]:
    """Counts what the layouts do, from an empty cache."""
    counted = Work()
    sweep, layout = graph_layout._sweep, graph_layout.layout

    def counting_sweep(
        columns: list[list[str]], neighbours: Mapping[str, Sequence[str]], order: range
    ) -> None:
        for index in order:
            counted.keys += len(columns[index])
            counted.segments += sum(len(neighbours[key]) for key in columns[index])
        sweep(columns, neighbours, order)

    def counting_layout(*args: object) -> Layout:
        counted.layouts += 1
        return layout(*args)  # type: ignore[arg-type]

    monkeypatch.setattr(graph_layout, "_sweep", counting_sweep)
    monkeypatch.setattr(graph_layout, "layout", counting_layout)
    graph_layout._planned.cache_clear()
    yield counted
    graph_layout._planned.cache_clear()


def test_the_dense_definition_of_the_finding_gets_a_table_and_no_layout(work: Work) -> None:
    found = dense(140)
    page = step_graph(found.hash, found.ir, {"s3": _step("failed")})
    assert work == Work(keys=0, segments=0, layouts=0)
    assert page.startswith('<p class="graph-fallback">The step graph is not drawn: dense has 9,730')
    assert f"more than the {MAX_EDGES} a graph draws" in page
    table = ET.fromstring(page[page.index("<table") :])
    assert [th.text for th in table.iter("th")][:4] == ["Step", "Kind", "Status", "After"]
    rows = {row.get("data-step"): [cell.text for cell in row] for row in table.iter("tr")}
    assert len(rows) == 1 + 140
    assert rows["s3"] == ["s3", "sleep", "failed", "s0, s1, s2"]
    assert rows["s0"] == ["s0", "sleep", "pending", None]
    shown = ", ".join(f"s{index}" for index in range(AFTER_SHOWN))
    assert rows["s139"][-1] == f"{shown} and {139 - AFTER_SHOWN} more"
    assert len(page) < 40_000


def test_a_definition_page_table_has_no_status() -> None:
    found = chain(MAX_STEPS + 1)
    page = step_graph(found.hash, found.ir, {})
    assert f"drawn has {MAX_STEPS + 1} steps, more than the {MAX_STEPS} a graph shows" in page
    table = ET.fromstring(page[page.index("<table") :])
    assert [th.text for th in table.iter("th")][:3] == ["Step", "Kind", "After"]


@pytest.mark.parametrize(
    ("shape", "drawn"),
    [
        (lambda: chain(MAX_STEPS), True),
        (lambda: chain(MAX_STEPS + 1), False),
        (lambda: chain(MAX_STEPS, reach=11, long_edges=MAX_LANES // 10), True),
        (lambda: chain(MAX_STEPS, reach=11, long_edges=MAX_LANES // 10 + 1), False),
        (lambda: definition([[]] * 4 + [[0, 1, 2, 3]] * (MAX_EDGES // 4)), True),
        (lambda: definition([[]] * 4 + [[0, 1, 2, 3]] * (MAX_EDGES // 4) + [[0]]), False),
        (lambda: dense(18), True),
        (lambda: dense(140), False),
    ],
    ids=[
        "chain at the steps",
        "chain past them",
        "long edges at the lanes",
        "long edges past them",
        "fan-in at the edges",
        "fan-in past them",
        "dense 18",
        "dense 140",
    ],
)
def test_the_work_of_a_layout_is_bounded(
    work: Work, shape: Callable[[], Definition], drawn: bool
) -> None:
    found = shape()
    planned = plan(found.hash, found.ir)
    assert isinstance(planned, Layout) is drawn
    if isinstance(planned, TooBig):
        assert work.layouts == 0
        return
    items = sum(len(column) for column in planned.columns)
    assert items <= MAX_STEPS + MAX_LANES
    assert work.keys <= 2 * SWEEPS * (MAX_STEPS + MAX_LANES)
    assert work.segments <= 2 * SWEEPS * 2 * (MAX_EDGES + MAX_LANES)
    svg = ET.fromstring(step_graph(found.hash, found.ir, {}))
    assert svg.tag == f"{SVG}svg"
    assert len(svg.findall(f".//{SVG}path[@class='edge']")) == len(planned.chains)


def test_a_layout_is_kept_per_definition_hash(work: Work) -> None:
    first, second = chain(30), chain(31)
    for _ in range(3):
        drawn = step_graph(first.hash, first.ir, {"s1": _step("succeeded")})
        assert 'data-step="s1" data-status="succeeded"' in drawn
        assert 'data-step="s2" data-status="pending"' in drawn
    assert work.layouts == 1
    step_graph(second.hash, second.ir, {})
    assert work.layouts == 2
