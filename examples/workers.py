"""Workers for every example workflow: run them with ``orbit worker examples.workers:worker``.

Each task does the least that makes its workflow meaningful (no real stock,
cards or mail), but each shows a part of the SDK: pydantic contracts,
plain dicts, the idempotency key, heartbeats and a non-retryable error.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel

from orbit_sdk import TaskContext, TaskError, Worker, task

# -- hello-world --------------------------------------------------------------


class GreetIn(BaseModel):
    name: str


class GreetOut(BaseModel):
    greeting: str


@task("greet", version="1")
async def greet(inp: GreetIn, ctx: TaskContext) -> GreetOut:
    return GreetOut(greeting=f"Hello, {inp.name}!")


# -- fan-out ------------------------------------------------------------------


class Number(BaseModel):
    value: int


class Values(BaseModel):
    values: list[int]


class Total(BaseModel):
    total: int


@task("square", version="1")
async def square(inp: Number, ctx: TaskContext) -> Number:
    return Number(value=inp.value * inp.value)


@task("sum", version="1")
async def add_up(inp: Values, ctx: TaskContext) -> Total:
    return Total(total=sum(inp.values))


# -- send-invoice (the child of order-fulfilment) -----------------------------


@task("render-invoice", version="1")
async def render_invoice(inp: dict[str, Any], ctx: TaskContext) -> dict[str, Any]:
    # The idempotency key is the same on every retry: a real renderer would use it
    # as the invoice's key, so a retried render never makes a second invoice.
    return {"invoice_id": f"inv-{inp['order']}", "key": ctx.idempotency_key}


@task("mail-invoice", version="1")
async def mail_invoice(inp: dict[str, Any], ctx: TaskContext) -> dict[str, Any]:
    return {"mailed": inp.get("invoice")}


# -- order-fulfilment ---------------------------------------------------------


class ReserveIn(BaseModel):
    order: str
    items: list[dict[str, Any]]


class Reservation(BaseModel):
    id: str


@task("reserve-stock", version="1")
async def reserve_stock(inp: ReserveIn, ctx: TaskContext) -> Reservation:
    if any(item.get("sku") == "out-of-stock" for item in inp.items):
        raise TaskError("OUT_OF_STOCK", "an item is out of stock", retryable=False)
    return Reservation(id=f"res-{inp.order}")


class ChargeIn(BaseModel):
    order: str
    currency: str = "EUR"
    attempt: int = 1


class ChargeOut(BaseModel):
    amount: int


@task("charge-card", version="2")
async def charge_card(inp: ChargeIn, ctx: TaskContext) -> ChargeOut:
    if ctx.cancelled.is_set():
        raise TaskError("CANCELLED", "stopped", retryable=False)
    await ctx.heartbeat()
    return ChargeOut(amount=4200)


@task("ship-item", version="1")
async def ship_item(inp: dict[str, Any], ctx: TaskContext) -> dict[str, Any]:
    return {"shipped": inp.get("sku")}


@task("release-stock", version="1")
async def release_stock(inp: dict[str, Any], ctx: TaskContext) -> dict[str, Any]:
    return {"released": inp.get("reservation")}


@task("refund-card", version="1")
async def refund_card(inp: dict[str, Any], ctx: TaskContext) -> dict[str, Any]:
    return {"refunded": inp.get("amount")}


@task("release-lock", version="1")
async def release_lock(inp: dict[str, Any], ctx: TaskContext) -> dict[str, Any]:
    return {"unlocked": inp.get("order")}


# -- approval -----------------------------------------------------------------


@task("submit-request", version="1")
async def submit_request(inp: dict[str, Any], ctx: TaskContext) -> dict[str, Any]:
    return {"submitted": inp.get("request")}


@task("notify-requester", version="1")
async def notify_requester(inp: dict[str, Any], ctx: TaskContext) -> dict[str, Any]:
    return {"sent": True, "approved": inp.get("approved")}


TASKS = [
    greet,
    square,
    add_up,
    render_invoice,
    mail_invoice,
    reserve_stock,
    charge_card,
    ship_item,
    release_stock,
    refund_card,
    release_lock,
    submit_request,
    notify_requester,
]

worker = Worker(TASKS, worker_id="examples", concurrency=32)
