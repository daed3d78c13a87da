"""Firing due timers: rows of ``timers`` become :class:`TimerDue` messages to the decider.

The decider keeps ``timers`` equal to what each execution waits on (retry
backoffs, sleeps, await and attempt timeouts, the workflow timeout), in the
same transaction as the events that set them. Firing deletes the due rows
under ``FOR UPDATE SKIP LOCKED`` and publishes their messages before the
delete commits: several timer replicas never fire a row twice, and a
publish that fails rolls the delete back. A firing that the decider does not
need (the execution moved on) changes nothing there.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

from orbit_model.messages import TimerDue
from orbit_model.timer_keys import MalformedTimerKey, TimerKey
from orbit_model.topology import Topology
from orbit_sdk.amqp import Publisher
from orbit_services.runtime import metrics
from orbit_services.store import DueTimer, EventStore, OutboxMessage

log = logging.getLogger("orbit.timer")


async def fire_due(
    store: EventStore, publisher: Publisher, topology: Topology, now: int, limit: int = 500
) -> int:
    """Fire every timer due at ``now`` (up to ``limit``); how many fired."""

    async def publish(due: Sequence[DueTimer]) -> None:
        messages = [
            OutboxMessage.to(
                topology.decider_route(timer.execution_id),
                TimerDue(execution_id=timer.execution_id, key=timer.key, due_at=timer.due_at),
            )
            for timer in due
        ]
        await publisher.publish_many(messages)

    fired = await store.timers.fire_due(now, limit, publish)
    # Committed now (the delete with the publish): count and time them.
    for timer in fired:
        kind = timer_kind(timer.key)
        metrics.TIMERS_FIRED.labels(kind).inc()
        metrics.TIMER_LATENESS.labels(kind).observe(max(now - timer.due_at, 0) / 1000)
    if fired:
        log.debug("fired %d timers", len(fired), extra={"action": "timers.fired"})
    return len(fired)


def timer_kind(key: str) -> str:
    """The kind of a timer key (``retry``, ``timer``, ``timeout``, ``schedule``,
    ``heartbeat``, ``workflow``): the bounded part of it, for metrics."""
    try:
        return TimerKey.parse(key).kind.value
    except MalformedTimerKey:  # only the decider writes the table: not expected
        return "malformed"
