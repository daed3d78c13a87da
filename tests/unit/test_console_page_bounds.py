"""The console's pages list and compare within bounds: an execution's page lists the
latest :data:`HISTORY_SHOWN` events, a definition's diff compares texts of at most
:data:`MAX_DIFF_LINES` lines (its work grows with the product of the two)."""

from __future__ import annotations

from typing import Any

from orbit_services.gateway.console.catalog import MAX_DIFF_LINES, _diff
from orbit_services.gateway.console.execution_page import HISTORY_SHOWN, _history_shown


def _history(events: int) -> list[dict[str, Any]]:
    kinds = ("StepDispatched", "StepSucceeded")
    return [{"seq": seq, "type": kinds[seq % 2], "data": {}} for seq in range(1, events + 1)]


def test_the_page_lists_the_latest_events_of_the_types_asked_for() -> None:
    history = _history(90_000)
    shown = _history_shown(history, [])
    assert shown["history_count"] == 90_000
    assert [event["seq"] for event in shown["history"]] == list(range(89_501, 90_001))
    dispatched = _history_shown(history, ["StepDispatched"])
    assert dispatched["history_count"] == 45_000
    assert len(dispatched["history"]) == HISTORY_SHOWN
    assert dispatched["history"][-1]["seq"] == 90_000
    assert _history_shown(history[:10], [])["history"] == history[:10]


def test_texts_past_the_diff_bound_are_not_compared() -> None:
    old = "\n".join(f"line {index}" for index in range(MAX_DIFF_LINES))
    new = old.replace("line 7\n", "line seven\n")
    assert ("remove", "-line 7") in _diff(old, new, "w@1", "w@2")
    longer = new + "\none more"
    assert _diff(old, longer, "w@1", "w@2") == (
        "Not compared here: w@1 or w@2 has 2,001 lines, more than the 2,000 the console"
        " compares. Compare them with a tool of your own."
    )
