"""Service logs: json lines for machines, with the service, the action and the execution id."""

from __future__ import annotations

import json
import logging

import pytest

from orbit_sdk.logs import MAX_CAUSES, LogThrottle, configure_logging


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


def test_a_throttle_logs_one_line_per_cause_per_interval_and_counts_the_rest(
    caplog: pytest.LogCaptureFixture,
) -> None:
    now = [100.0]
    throttle = LogThrottle(logging.getLogger("orbit.test"), interval=10, clock=lambda: now[0])
    with caplog.at_level(logging.WARNING, logger="orbit.test"):
        assert throttle.log(logging.WARNING, "pg", "Postgres is away: %s", "refused")
        for _ in range(5):
            assert not throttle.log(logging.WARNING, "pg", "Postgres is away: %s", "refused")
        assert throttle.log(logging.WARNING, "amqp", "RabbitMQ is away")  # a cause of its own
        now[0] += 12
        assert throttle.log(logging.WARNING, "pg", "Postgres is away: %s", "refused")
    assert [r.getMessage() for r in caplog.records] == [
        "Postgres is away: refused",
        "RabbitMQ is away",
        "Postgres is away: refused (and 5 more like it in the last 12 s)",
    ]


def test_a_throttle_forgets_quiet_causes_so_it_stays_bounded() -> None:
    now = [0.0]
    throttle = LogThrottle(logging.getLogger("orbit.test"), interval=10, clock=lambda: now[0])
    for n in range(MAX_CAUSES):
        throttle.log(logging.DEBUG, f"execution {n} kept changing", "x")
    now[0] += 11  # all of them quiet now
    throttle.log(logging.DEBUG, "fresh", "x")
    assert len(throttle._last) == 1
    # Causes all still loud are dropped all the same, rather than grow without bound.
    for n in range(MAX_CAUSES):
        throttle.log(logging.DEBUG, f"loud {n}", "x")
    assert len(throttle._last) <= MAX_CAUSES
