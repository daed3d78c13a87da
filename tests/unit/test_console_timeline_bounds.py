"""The timeline's drawing is bounded by :data:`MAX_SPANS` bars and marks, whatever the
history: a step retried 30,000 times drew 30,000 bars and 30,000 marks (26 MB) before.
Pure: the histories are written as the API gives them."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from datetime import UTC, datetime, timedelta
from typing import Any

from orbit_model.compiler import compile_definition
from orbit_model.ir import WorkflowIR
from orbit_services.gateway.console.timeline import MAX_ROWS, MAX_SPANS, timeline_svg

SVG = "{http://www.w3.org/2000/svg}"
T0 = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)


def _ir(steps: int) -> WorkflowIR:
    lines = ["orbit: 1", "workflow: drawn", "version: 1.0.0", "tasks:", '  t: {version: "1"}']
    lines.append("steps:")
    for index in range(steps):
        lines += [f"  - id: s{index}", "    task: t", "    after: []"]
        lines.append("    retry: {max_attempts: 1000000}")
    return compile_definition("\n".join(lines) + "\n").ir


def _event(history: list[dict[str, Any]], kind: str, **data: Any) -> None:
    at = T0 + timedelta(milliseconds=len(history))
    history.append(
        {"seq": len(history) + 1, "recorded_at": at.isoformat(), "type": kind, "data": data}
    )


def _retried(units: list[str], attempts: int) -> list[dict[str, Any]]:
    """Each unit fails ``attempts`` times, each failure followed by a retry's wait."""
    history: list[dict[str, Any]] = []
    _event(history, "WorkflowCreated", workflow="drawn")
    for attempt in range(1, attempts + 1):
        for unit in units:
            _event(history, "StepDispatched", unit=unit, attempt=attempt)
            error = {"code": "DECLINED", "message": f"no {attempt}"}
            _event(history, "StepAttemptFailed", unit=unit, attempt=attempt, error=error)
            _event(history, "RetryScheduled", unit=unit, next_attempt=attempt + 1)
    return history


def _rows(svg: str) -> list[ET.Element]:
    return ET.fromstring(svg).findall(f".//{SVG}g[@class='row']")


def test_one_step_retried_30000_times_draws_its_last_spans_only() -> None:
    svg = timeline_svg(_retried(["s0"], 30_000), _ir(1))
    [row] = _rows(svg)
    bars = row.findall(f"{SVG}rect[@data-unit='s0']")
    marks = row.findall(f"{SVG}path[@class='failure-mark']")
    assert len(bars) == MAX_SPANS
    assert len(marks) == MAX_SPANS
    assert bars[-1].get("data-attempt") == "30001"  # the retry's wait, still open
    label = row.find(f"{SVG}text[@class='row-label']/{SVG}title")
    assert label is not None
    assert label.text == f"s0 (task), its first {60_000 - MAX_SPANS:,} spans not drawn"
    assert len(svg) < 1_500_000


def test_the_bars_are_shared_among_the_rows_shown() -> None:
    units = [f"s{index}" for index in range(MAX_ROWS + 20)]
    svg = timeline_svg(_retried(units, 10), _ir(len(units)))
    rows = _rows(svg)
    assert len(rows) == MAX_ROWS
    share = MAX_SPANS // MAX_ROWS
    drawn = [len(row.findall(f"{SVG}rect[@data-unit]")) for row in rows]
    assert drawn == [share] * MAX_ROWS
    assert sum(drawn) <= MAX_SPANS
    assert "… and 20 more units" in svg


def test_a_row_within_its_share_is_drawn_whole() -> None:
    svg = timeline_svg(_retried(["s0", "s1"], 3), _ir(2))
    for row in _rows(svg):
        assert len(row.findall(f"{SVG}rect[@data-unit]")) == 6
        label = row.find(f"{SVG}text[@class='row-label']/{SVG}title")
        assert label is not None
        assert "not drawn" not in str(label.text)
