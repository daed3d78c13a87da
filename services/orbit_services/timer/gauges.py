"""The gauges read from Postgres: active executions, timers due, the outbox.

The timer service refreshes them every ``ORBIT_GAUGE_INTERVAL_MS``; with
several timer replicas each reports the same figures (take ``max`` across
them). The queries are answered from indexes (``orbit_services.store.sql``).
"""

from __future__ import annotations

from orbit_services.runtime import metrics
from orbit_services.store import EventStore


class Gauges:
    """Sets the Postgres-backed gauges; remembers workflows so one gone idle reads 0."""

    def __init__(self, store: EventStore) -> None:
        self.store = store
        self._workflows: set[str] = set()

    async def refresh(self, now_ms: int) -> None:
        active = await self.store.active_executions()
        for workflow in self._workflows - active.keys():
            metrics.EXECUTIONS_ACTIVE.labels(workflow).set(0)
        for workflow, count in active.items():
            metrics.EXECUTIONS_ACTIVE.labels(workflow).set(count)
        self._workflows |= active.keys()
        backlog = await self.store.backlog(now_ms)
        metrics.TIMERS_DUE.set(backlog.timers_due)
        metrics.OUTBOX_DEPTH.set(backlog.outbox_depth)
        metrics.OUTBOX_OLDEST.set(backlog.outbox_oldest_seconds)


__all__ = ["Gauges"]
