"""The console's pure parts: why an execution waits in words, the signal form built from
a JSON Schema and read back, and the steps table's worker and times."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given
from hypothesis import strategies as st

from orbit_model.compiler import compile_definition
from orbit_model.errors import OrbitError
from orbit_model.views import (
    StepView,
    WaitsForElements,
    WaitsForRetry,
    WaitsForSignal,
    WaitsForWorker,
)
from orbit_services.gateway.console.banner import reason
from orbit_services.gateway.console.forms import JSON_FIELD, form_fields, payload_of
from orbit_services.gateway.console.steps import human_duration, step_rows

IR = compile_definition("""
orbit: 1
workflow: pay
version: 1.0.0
tasks:
  pay: {version: "1"}
steps:
  - id: charge
    task: pay
    retry: {max_attempts: 5}
""").ir

SCHEMA = {
    "type": "object",
    "required": ["approved"],
    "properties": {
        "approved": {"type": "boolean"},
        "comment": {"type": "string", "maxLength": 20},
        "amount": {"type": "integer", "minimum": 1},
        "level": {"enum": ["low", "high"]},
    },
}


def test_each_wait_reads_as_a_sentence() -> None:
    signal = WaitsForSignal(kind="signal", name="approval", timeout_at=None)
    assert reason("approval", signal, IR) == "waiting for signal approval"
    worker = WaitsForWorker(
        kind="worker", task="pay@1", workers_online=0, held_by=None, attempt=1, timeout_at=None
    )
    assert reason("charge", worker, IR) == "charge: waiting for a worker for pay@1 (none online)"
    at = datetime.now(UTC).replace(hour=14, minute=2, second=10, microsecond=0)
    retry = WaitsForRetry(kind="retry", attempt=3, at=at.isoformat(), last_error="DECLINED")
    assert reason("charge", retry, IR) == "charge: retry 3 of 5 at 14:02:10 after DECLINED"
    held = worker.model_copy(update={"held_by": "w-1", "workers_online": 1})
    assert reason("charge", held, IR) == "charge: running on worker w-1 (attempt 1)"
    elements = WaitsForElements(kind="elements", total=5, counts={"succeeded": 2}, task="ship@1")
    assert "2 of 5 elements done" in reason("ship", elements, IR)


def test_a_flat_object_schema_becomes_fields_with_the_browsers_checks() -> None:
    fields = {field.name: field for field in form_fields(SCHEMA) or []}
    assert fields["approved"].kind == "boolean"
    assert fields["approved"].required
    assert fields["comment"].attributes == {"maxlength": "20"}
    assert fields["amount"].attributes == {"min": "1"}
    assert fields["level"].choices == ("low", "high")


def test_the_answers_become_the_payload() -> None:
    form = {"field.approved": "true", "field.comment": "ok", "field.amount": "3", "field.level": ""}
    assert payload_of(SCHEMA, form) == {"approved": True, "comment": "ok", "amount": 3}
    with pytest.raises(OrbitError, match="approved is required"):
        payload_of(SCHEMA, {"field.comment": "x"})
    with pytest.raises(OrbitError, match="whole number"):
        payload_of(SCHEMA, {"field.approved": "false", "field.amount": "1.5"})


def test_other_schemas_take_json() -> None:
    nested = {"type": "object", "properties": {"items": {"type": "array"}}}
    assert form_fields(nested) is None
    assert form_fields(None) is None
    assert payload_of(nested, {JSON_FIELD: '{"items": [1]}'}) == {"items": [1]}
    assert payload_of(None, {JSON_FIELD: ""}) is None
    with pytest.raises(OrbitError, match="not valid JSON"):
        payload_of(nested, {JSON_FIELD: "{"})


@given(st.text(max_size=30))
def test_any_text_in_a_string_field_is_kept_as_typed(text: str) -> None:
    # The engine checks the schema (maxLength here) when the signal is sent.
    payload = payload_of(SCHEMA, {"field.approved": "true", "field.comment": text})
    assert payload.get("comment", "") == text.strip()


def test_the_steps_table_takes_the_worker_and_times_from_the_history() -> None:
    start = datetime(2026, 12, 7, 12, 0, tzinfo=UTC)

    def entry(seq: int, kind: str, seconds: float, **data: object) -> dict[str, object]:
        at = start + timedelta(seconds=seconds)
        return {"seq": seq, "recorded_at": at.isoformat(), "type": kind, "data": data}

    history = [
        entry(1, "StepScheduled", 0, unit="charge"),
        entry(2, "StepDispatched", 0.1, unit="charge", attempt=1),
        entry(3, "StepAttemptFailed", 0.5, unit="charge", attempt=1, worker_id="w-1"),
        entry(4, "StepDispatched", 1.5, unit="charge", attempt=2),
        entry(5, "StepSucceeded", 2.0, unit="charge", attempt=2, worker_id="w-2"),
    ]
    charge = StepView(
        status="succeeded", attempt=2, output=None, error=None, kind="task", waiting_for=None
    )
    view = {"charge": charge}
    (row,) = step_rows(view, history)
    assert row.worker == "w-2"
    assert row.duration == "2.0 s"
    running = {"charge": charge.model_copy(update={"status": "dispatched"})}
    assert step_rows(running, history[:4])[0].duration == ""


def test_durations_read_in_the_unit_that_suits_them() -> None:
    assert human_duration(0.25) == "250 ms"
    assert human_duration(12.34) == "12.3 s"
    assert human_duration(245) == "4 min 05 s"
    assert human_duration(7380) == "2 h 03 min"
