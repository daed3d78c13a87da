"""Service logs: json lines for machines, with the service, the action and the execution id."""

from __future__ import annotations

import json
import logging

import pytest

from orbit_sdk.logs import configure_logging


@pytest.fixture(autouse=True)
def _restore_logging() -> object:
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    yield None
    root.handlers[:] = handlers
    root.setLevel(level)


def test_a_json_line_carries_the_service_action_and_execution(
    capsys: pytest.CaptureFixture[str],
) -> None:
    configure_logging("decider", "INFO", "json")
    logging.getLogger("orbit.decider").warning(
        "decision failed: %s", "boom", extra={"action": "decide.failed", "execution_id": "e-1"}
    )
    line = capsys.readouterr().err.strip().splitlines()[-1]
    record = json.loads(line)
    assert record["service"] == "decider"
    assert record["action"] == "decide.failed"
    assert record["execution_id"] == "e-1"
    assert record["message"] == "decision failed: boom"
    assert record["level"] == "warning"


def test_text_lines_show_the_fields_after_the_message(capsys: pytest.CaptureFixture[str]) -> None:
    configure_logging("timer", "INFO", "text")
    logging.getLogger("orbit.timer").info("fired", extra={"action": "timers.fired", "count": 3})
    line = capsys.readouterr().err.strip().splitlines()[-1]
    assert line.endswith("timer fired action=timers.fired count=3")


def test_the_level_filters(capsys: pytest.CaptureFixture[str]) -> None:
    configure_logging("gateway", "WARNING", "json")
    logging.getLogger("orbit.gateway").info("quiet")
    assert capsys.readouterr().err == ""
