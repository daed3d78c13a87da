"""What a worker holds (each task from its delivery to its ack), and how a task's message
is settled and its result published."""

from __future__ import annotations

import asyncio
import importlib.metadata
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

import aiormq
from aio_pika.abc import AbstractIncomingMessage

from orbit_model.messages import InflightTask, Route, TaskAssignment
from orbit_sdk.amqp import Publisher, settle
from orbit_sdk.logs import LogThrottle
from orbit_sdk.tasks import TaskContext, TaskOutcome

log = logging.getLogger("orbit.worker")


def sdk_version() -> str:
    try:
        return f"orbit-python/{importlib.metadata.version('orbit-sdk')}"
    except importlib.metadata.PackageNotFoundError:
        return "orbit-python"


@dataclass
class Running:
    """A task this worker holds, from delivery to ack."""

    assignment: TaskAssignment
    context: TaskContext
    messages: list[AbstractIncomingMessage]
    """The deliveries to settle once it ends: its own, and any copy of the same token
    that came while it ran (a redelivery after a lost connection, or a message
    published twice)."""
    run: asyncio.Task[TaskOutcome] | None = None
    heartbeat_at: int = 0
    """Epoch ms the task started or last called ``ctx.heartbeat()``: what
    ``heartbeat_timeout`` is judged on."""
    abandoned: bool = False
    """Set when stopping gave up waiting: the task goes back to its queue."""

    def inflight(self, token: str, now: int) -> InflightTask:
        """What a heartbeat sent at ``now`` (epoch ms) says of it: also how long ago it
        last heartbeated, which the engine reads on its own clock (ours may be off)."""
        return InflightTask(
            execution_id=self.assignment.execution_id,
            token=token,
            heartbeat_at=self.heartbeat_at,  # for services that predate the age
            heartbeat_age_ms=max(now - self.heartbeat_at, 0),
        )

    async def settle(self, *, requeue: bool) -> None:
        """Ack its deliveries (the result is out), or give them back (``requeue``)."""
        for message in self.messages:
            await settle_task(message.nack(requeue=True) if requeue else message.ack())


@dataclass
class PendingHeartbeat:
    task: asyncio.Task[None]
    tokens: frozenset[str] = field(default_factory=frozenset)


def channel_closed(message: AbstractIncomingMessage) -> bool:
    """Whether the channel ``message`` came on has closed: it can no longer be acked,
    and RabbitMQ hands it (or has handed it) to another consumer."""
    try:
        return message.channel.is_closed
    except aiormq.exceptions.ChannelInvalidStateError:
        return True


async def settle_task(outcome: Awaitable[object]) -> None:
    """Ack, nack or reject a task message (:func:`~orbit_sdk.amqp.settle`); a worker
    given one again that it could not settle asks the engine before running it."""
    await settle(outcome, log, action="task.settle_failed", level=logging.INFO)


RESULT_PATIENCE_SECONDS = 30.0
"""How long a finished task's result is tried again while RabbitMQ is away (the
connection comes back by itself): a result given up on means the task runs again."""


async def publish_result(
    publisher: Publisher, route: Route, body: bytes, failures: LogThrottle
) -> bool:
    """Publish a task's result, tried again for :data:`RESULT_PATIENCE_SECONDS` (a lost
    connection, a broker restart, a frozen process waking up); whether it went."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + RESULT_PATIENCE_SECONDS
    delay = 0.2
    while True:
        try:
            await publisher.publish(route.exchange, route.routing_key, body)
            return True
        except Exception as error:
            if loop.time() + delay > deadline:
                log.error(
                    "publishing a result to %s/%s failed for %.0f s; the task will run again: %r",
                    route.exchange,
                    route.routing_key,
                    RESULT_PATIENCE_SECONDS,
                    error,
                    extra={"action": "task.result_lost"},
                )
                return False
            failures.log(
                logging.WARNING,
                "result",
                "publishing a result to %s/%s failed; trying again: %r",
                route.exchange,
                route.routing_key,
                error,
                extra={"action": "task.result_failed"},
            )
            await asyncio.sleep(delay)
            delay = min(delay * 2, 2.0)


async def still_wanted(running: Running, heartbeat: Callable[[str], Awaitable[None]]) -> bool:
    """Whether to run a delivery; one that is not is acked (where it still can be).

    A delivery that may not be the only one of its unit (RabbitMQ delivers
    it again, or the engine dispatched it again after losing a worker) is
    first named in a heartbeat, which also tells the engine at once that
    this worker holds it; it is skipped if the answer cancels it (the engine
    moved on: running it would be one run too many). If the dispatcher does
    not answer, it runs. A delivery is also skipped once the channel it came
    on has closed (and no copy came on a live one): it was read from the
    socket after the connection died (a frozen process waking up), and
    RabbitMQ gives it to another worker.
    """
    assignment = running.assignment
    first = running.messages[0]
    if first.redelivered or assignment.redelivery:
        await heartbeat(assignment.token)
    if all(channel_closed(message) for message in running.messages):
        why = "the connection it came on is gone"
    elif running.context.cancelled.is_set():
        why = "the engine dispatched it again since"
    else:
        return True
    log.info(
        "skipping %s of %s: %s",
        assignment.unit,
        assignment.execution_id,
        why,
        extra={"action": "task.skipped", "execution_id": assignment.execution_id},
    )
    await running.settle(requeue=False)
    return False
