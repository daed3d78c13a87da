"""Task functions: contracts from their models, and every outcome a run can have."""

from __future__ import annotations

import asyncio
from datetime import date
from typing import Any

import pytest
from pydantic import BaseModel

import orbit_sdk
from orbit_sdk import TaskContext, TaskError, task
from orbit_sdk.tasks import TaskOutcome, task_definition
from orbit_services.runtime.settings import load_settings


class ChargeIn(BaseModel):
    order: str
    currency: str = "EUR"


class ChargeOut(BaseModel):
    amount: int
    on: date


@task("charge-card", version="2")
async def charge_card(inp: ChargeIn, ctx: TaskContext) -> ChargeOut:
    if inp.order == "declined":
        raise TaskError("CARD_DECLINED", "declined", retryable=False, details={"bank": "x"})
    if inp.order == "broken":
        raise KeyError("card")
    if inp.order == "bad-output":
        return {"amount": "lots"}  # type: ignore[return-value]
    return ChargeOut(amount=4200 if ctx.attempt == 1 else 0, on=date(2026, 1, 2))


@task("echo")
async def echo(inp: dict[str, Any]) -> dict[str, Any]:
    return {"got": inp}


def test_the_public_names() -> None:
    assert set(orbit_sdk.__all__) >= {"Worker", "task", "TaskContext", "TaskError", "OrbitClient"}


def test_the_decorated_function_still_runs_as_written() -> None:
    out = asyncio.run(charge_card(ChargeIn(order="o"), TaskContext()))
    assert out == ChargeOut(amount=4200, on=date(2026, 1, 2))


def test_contracts_come_from_the_models() -> None:
    contract = task_definition(charge_card).contract
    assert (contract.task, contract.version) == ("charge-card", "2")
    assert contract.input_schema == ChargeIn.model_json_schema()
    assert contract.output_schema == ChargeOut.model_json_schema()
    plain = task_definition(echo).contract
    assert (plain.task, plain.version, plain.input_schema, plain.output_schema) == (
        "echo",
        "1",
        None,
        None,
    )


async def _run(fn: Any, data: Any, ctx: TaskContext | None = None) -> TaskOutcome:
    return await task_definition(fn).run(data, ctx or TaskContext())


async def test_input_is_parsed_and_output_serialised() -> None:
    outcome = await _run(charge_card, {"order": "o-1"})
    assert outcome == TaskOutcome(output={"amount": 4200, "on": "2026-01-02"})
    assert (await _run(echo, {"a": [1]})).output == {"got": {"a": [1]}}


async def test_the_context_reaches_the_task() -> None:
    outcome = await _run(charge_card, {"order": "o-1"}, TaskContext(attempt=2))
    assert outcome.output == {"amount": 0, "on": "2026-01-02"}


async def test_a_bad_input_is_not_retried() -> None:
    outcome = await _run(charge_card, {"currency": 5})
    assert outcome.output is None
    assert outcome.error is not None
    assert (outcome.error.code, outcome.error.retryable) == ("INVALID_INPUT", False)
    assert "order: Field required" in outcome.error.message
    assert "currency: Input should be a valid string" in outcome.error.message


async def test_a_task_error_keeps_its_code() -> None:
    outcome = await _run(charge_card, {"order": "declined"})
    assert outcome.error is not None
    assert outcome.error.model_dump() == {
        "code": "CARD_DECLINED",
        "message": "declined",
        "retryable": False,
        "details": {"bank": "x"},
    }


async def test_any_other_exception_is_a_retryable_task_failure() -> None:
    outcome = await _run(charge_card, {"order": "broken"})
    assert outcome.error is not None
    assert outcome.error.model_dump() == {
        "code": "TASK_FAILED",
        "message": "KeyError: 'card'",
        "retryable": True,
        "details": {"type": "KeyError"},
    }


async def test_an_output_that_breaks_its_model_is_not_retried() -> None:
    outcome = await _run(charge_card, {"order": "bad-output"})
    assert outcome.error is not None
    assert (outcome.error.code, outcome.error.retryable) == ("INVALID_OUTPUT", False)


async def test_heartbeat_outside_a_worker_does_nothing() -> None:
    await TaskContext().heartbeat()


def test_only_async_functions_with_an_input_are_tasks() -> None:
    def sync(inp: dict[str, Any]) -> None:
        return None

    async def nothing() -> None:
        return None

    with pytest.raises(TypeError, match="async def"):
        task("sync")(sync)  # type: ignore[type-var]
    with pytest.raises(TypeError, match="must take its input"):
        task("nothing")(nothing)
    with pytest.raises(TypeError, match="not a task"):
        task_definition(nothing)


def test_a_worker_refuses_bad_task_lists() -> None:
    settings = load_settings()
    with pytest.raises(ValueError, match="at least one task"):
        orbit_sdk.Worker([], settings=settings)
    with pytest.raises(ValueError, match="given twice"):
        orbit_sdk.Worker([echo, echo], settings=settings)
    with pytest.raises(ValueError, match="concurrency"):
        orbit_sdk.Worker([echo], concurrency=0, settings=settings)
