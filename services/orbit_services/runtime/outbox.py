"""The outbox relay: messages committed with their events reach RabbitMQ exactly when they should.

A writer commits events and the messages they call for in one transaction,
then hands the rows to :meth:`OutboxRelay.publish_committed`, which publishes
them (confirmed, pipelined); the published rows are deleted in bulk, in the
writer's next append transaction (or by the sweeper's flush when no append
comes within ``sweep_interval``), so they cost no transaction of their own.
Nothing is published for a
transaction that rolled back, because nothing is published before the
commit. If the writer dies between commit and publish, the rows stay; every
relay sweeps rows older than a grace period, under ``FOR UPDATE SKIP
LOCKED`` so two relays never take the same row, and publishes them. A
message may so be published twice (a crash after publish, before delete):
every consumer is idempotent on its input.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Sequence

from orbit_sdk.amqp import Publisher
from orbit_services.runtime import metrics
from orbit_services.runtime.store import EventStore, OutboxMessage, sql

log = logging.getLogger("orbit.outbox")


class OutboxRelay:
    def __init__(
        self,
        store: EventStore,
        publisher: Publisher,
        grace_seconds: float = 5.0,
        sweep_interval: float = 1.0,
        service: str = "unknown",
    ) -> None:
        self.service = service
        """The service relaying, the ``service`` label of the outbox metrics."""
        self.store = store
        self.publisher = publisher
        self.grace_seconds = grace_seconds
        self.sweep_interval = sweep_interval

    async def publish_committed(
        self, ids: Sequence[int], messages: Sequence[OutboxMessage]
    ) -> None:
        """Publish rows the caller just committed, then delete them.

        If publishing fails, the rows stay for the sweep; the caller's work is
        durable either way, so the failure is logged, not raised.
        """
        if not messages:
            return
        handed = time.perf_counter()
        try:
            await self.publisher.publish_many(messages)
        except Exception as error:
            metrics.OUTBOX_PUBLISH_FAILURES.labels(self.service).inc(len(messages))
            log.warning(
                "outbox publish failed, the sweep will retry: %r",
                error,
                extra={"action": "outbox.publish_failed", "count": len(messages)},
            )
            return
        metrics.OUTBOX_PUBLISHED.labels(self.service).inc(len(messages))
        metrics.OUTBOX_RELAY_LAG.labels(self.service).observe(time.perf_counter() - handed)
        # Deleted later, in bulk. Should this process die first, the sweep publishes
        # them once more (every consumer is idempotent on its input) and deletes them.
        self.store.outbox_published(ids)

    async def sweep_once(self, limit: int = 500) -> int:
        """Publish rows left behind by writers that did not; how many."""
        async with self.store.pool.acquire() as connection, connection.transaction():
            rows = await connection.fetch(sql.TAKE_STALE_OUTBOX, self.grace_seconds, limit)
            if not rows:
                return 0
            # One by one (still pipelined): a row that cannot be published must not
            # hold back, or make us publish again and again, the rows that can.
            outcomes = await asyncio.gather(
                *(
                    self.publisher.publish(
                        row["exchange"],
                        row["routing_key"],
                        bytes(row["body"]),
                        headers=json.loads(row["headers"]) if row["headers"] else None,
                    )
                    for row in rows
                ),
                return_exceptions=True,
            )
            published = [
                row["id"] for row, outcome in zip(rows, outcomes, strict=True) if outcome is None
            ]
            for row, outcome in zip(rows, outcomes, strict=True):
                if isinstance(outcome, BaseException):
                    log.error(
                        "outbox message %d to %s cannot be published: %r",
                        row["id"],
                        row["exchange"],
                        outcome,
                        extra={"action": "outbox.stuck", "routing_key": row["routing_key"]},
                    )
            await connection.execute(sql.DELETE_OUTBOX, published)
        metrics.OUTBOX_SWEPT.labels(self.service).inc(len(published))
        lag = metrics.OUTBOX_SWEEP_LAG.labels(self.service)
        for row, outcome in zip(rows, outcomes, strict=True):
            if outcome is None:
                lag.observe(float(row["age"]))
        log.info(
            "relayed %d outbox messages left behind",
            len(published),
            extra={"action": "outbox.swept", "count": len(published)},
        )
        return len(published)

    async def run_sweeper(self) -> None:
        """Every ``sweep_interval`` seconds (until cancelled): delete the published rows
        no append took along, and sweep the rows writers left behind."""
        while True:
            try:
                await self.store.flush_published()
                while await self.sweep_once() > 0:
                    pass
            except asyncio.CancelledError:
                raise
            except Exception as error:
                log.warning(
                    "outbox sweep failed: %r", error, extra={"action": "outbox.sweep_failed"}
                )
            await asyncio.sleep(self.sweep_interval)
