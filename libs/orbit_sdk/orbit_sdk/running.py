"""What a worker holds: each task from its delivery to its ack, and how its message is settled."""

from __future__ import annotations

import asyncio
import importlib.metadata
import logging
import time
from collections.abc import Awaitable
from dataclasses import dataclass, field

from orbit_model.messages import TaskAssignment
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
    run: asyncio.Task[TaskOutcome] | None = None
    heartbeat_at: int = 0
    """Epoch ms the task started or last called ``ctx.heartbeat()``: what
    ``heartbeat_timeout`` is judged on."""
    abandoned: bool = False
    """Set when stopping gave up waiting: the task goes back to its queue."""


@dataclass
class PendingHeartbeat:
    task: asyncio.Task[None]
    tokens: frozenset[str] = field(default_factory=frozenset)


def epoch_ms() -> int:
    return int(time.time() * 1000)


async def settle(outcome: Awaitable[object]) -> None:
    # An ack or nack on a channel that is gone fails; the broker requeues
    # the message by itself then.
    try:
        await outcome
    except Exception as error:
        log.warning("settling a task message failed: %r", error)
