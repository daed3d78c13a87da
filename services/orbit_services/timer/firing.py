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

from orbit_model.messages import TimerDue, encode
from orbit_model.topology import Topology
from orbit_sdk.amqp import Publisher
from orbit_services.runtime import metrics
from orbit_services.runtime.store import EventStore, OutboxMessage, sql

log = logging.getLogger("orbit.timer")


async def fire_due(
    store: EventStore, publisher: Publisher, topology: Topology, now: int, limit: int = 500
) -> int:
    """Fire every timer due at ``now`` (up to ``limit``); how many fired."""
    async with store.pool.acquire() as connection, connection.transaction():
        rows = await connection.fetch(sql.TAKE_DUE_TIMERS, now, limit)
        if not rows:
            return 0
        messages = []
        for row in rows:
            due = TimerDue(execution_id=row["execution_id"], key=row["key"], due_at=row["due_at"])
            route = topology.decider_route(due.execution_id)
            messages.append(OutboxMessage(route.exchange, route.routing_key, encode(due)))
        await publisher.publish_many(messages)
    # Committed now (the delete with the publish): count and time them.
    for row in rows:
        kind = timer_kind(row["key"])
        metrics.TIMERS_FIRED.labels(kind).inc()
        metrics.TIMER_LATENESS.labels(kind).observe(max(now - int(row["due_at"]), 0) / 1000)
    log.debug("fired %d timers", len(rows), extra={"action": "timers.fired"})
    return len(rows)


def timer_kind(key: str) -> str:
    """The kind of a timer key (``retry``, ``timer``, ``timeout``, ``schedule``,
    ``heartbeat``, ``workflow``): the bounded part of it, for metrics."""
    return key.partition(":")[0]


async def next_due(store: EventStore) -> int | None:
    """When the next timer is due (epoch ms), or None without timers."""
    value = await store.pool.fetchval(sql.NEXT_TIMER_DUE)
    return None if value is None else int(value)
