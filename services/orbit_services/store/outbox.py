"""The outbox: messages committed with their events reach RabbitMQ exactly when they should.

A writer commits events and the messages they call for in one transaction,
then hands the rows to :meth:`OutboxRelay.publish_committed`, which publishes
them (confirmed, pipelined); the published rows are deleted in bulk, in the
writer's next append (:meth:`OutboxStore.deleting`), or by the sweeper's
flush when no append comes within ``sweep_interval``, so they cost no
transaction of their own. Nothing is published for a transaction that rolled
back, because nothing is published before the commit. If the writer dies
between commit and publish, the rows stay; every relay sweeps rows older than
a grace period, under ``FOR UPDATE SKIP LOCKED`` so two relays never take the
same row, and publishes them. A message may so be published twice (a crash
after publish, before delete): every consumer is idempotent on its input.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
from collections.abc import Awaitable, Callable, Iterator, Sequence

from orbit_sdk.amqp import Publisher
from orbit_sdk.logs import LogThrottle
from orbit_services.runtime import metrics
from orbit_services.store import sql
from orbit_services.store.pool import Database
from orbit_services.store.rows import OutboxMessage, StaleOutboxRow

log = logging.getLogger("orbit.outbox")

PublishEach = Callable[[StaleOutboxRow], Awaitable[None]]


class OutboxStore:
    """The ``outbox`` table: rows published and waiting to be deleted, and rows left behind."""

    def __init__(self, database: Database) -> None:
        self._db = database
        # During a broker outage every row fails every second: one line per cause per 10 s.
        self._stuck = LogThrottle(log)
        self._published: list[int] = []
        """Rows published already, deleted with the next append (or a flush)."""

    def published(self, ids: Sequence[int]) -> None:
        """Rows the relay published: deleted in the next append's statement, so a step
        costs no transaction of its own for them (or by :meth:`flush_published`)."""
        self._published.extend(ids)

    @contextlib.contextmanager
    def deleting(self) -> Iterator[list[int]]:
        """The published rows for a write to delete; kept for the next one if it fails."""
        taken, self._published = self._published, []
        try:
            yield taken
        except BaseException:
            self._published = taken + self._published  # not deleted: next time
            raise

    async def flush_published(self) -> int:
        """Delete the published rows no append took along; how many."""
        with self.deleting() as taken:
            if taken:
                await self._db.execute(sql.outbox.DELETE_OUTBOX, ids=taken)
            return len(taken)

    async def sweep(
        self, grace_seconds: float, limit: int, publish: PublishEach
    ) -> list[StaleOutboxRow]:
        """Publish the rows older than ``grace_seconds`` (up to ``limit``) and delete those
        published, in one transaction holding them; the rows published.

        One by one (still pipelined): a row that cannot be published must not hold
        back, or make the sweep publish again and again, the rows that can.
        """
        async with self._db.transaction() as transaction:
            rows = [
                StaleOutboxRow(
                    id=row["id"],
                    exchange=row["exchange"],
                    routing_key=row["routing_key"],
                    body=bytes(row["body"]),
                    headers=json.loads(row["headers"]) if row["headers"] else None,
                    age_seconds=float(row["age"]),
                )
                for row in await transaction.fetch(
                    sql.outbox.TAKE_STALE_OUTBOX, grace_seconds=grace_seconds, limit=limit
                )
            ]
            if not rows:
                return []
            outcomes = await asyncio.gather(*(publish(row) for row in rows), return_exceptions=True)
            published = [
                row for row, outcome in zip(rows, outcomes, strict=True) if outcome is None
            ]
            for row, outcome in zip(rows, outcomes, strict=True):
                if isinstance(outcome, BaseException):
                    self._stuck.log(
                        logging.ERROR,
                        row.exchange,
                        "outbox message %d to %s cannot be published: %r",
                        row.id,
                        row.exchange,
                        outcome,
                        extra={"action": "outbox.stuck", "routing_key": row.routing_key},
                    )
            await transaction.execute(sql.outbox.DELETE_OUTBOX, ids=[row.id for row in published])
        return published


class OutboxRelay:
    """Publishes what a service committed, and sweeps what its writers left behind.

    Args:
        outbox: The store's outbox.
        publisher: Where messages go.
        grace_seconds: Age after which a row is taken as left behind.
        sweep_interval: Seconds between sweeps.
        service: The ``service`` label of the outbox metrics.
        publish_timeout: Seconds :meth:`publish_committed` waits for the broker's
            confirms before it leaves the rows to the sweep (None: as long as it takes).
            A request path sets it: a blocked or frozen broker would hold the request.
    """

    def __init__(
        self,
        outbox: OutboxStore,
        publisher: Publisher,
        grace_seconds: float = 5.0,
        sweep_interval: float = 1.0,
        service: str = "unknown",
        *,
        publish_timeout: float | None = None,
    ) -> None:
        self.outbox = outbox
        self.publish_timeout = publish_timeout
        self.publisher = publisher
        self.grace_seconds = grace_seconds
        self.sweep_interval = sweep_interval
        self.service = service
        self._failures = LogThrottle(log)

    async def publish_committed(
        self, ids: Sequence[int], messages: Sequence[OutboxMessage]
    ) -> None:
        """Publish rows the caller just committed, then have them deleted.

        If publishing fails, the rows stay for the sweep; the caller's work is
        durable either way, so the failure is logged, not raised.
        """
        if not messages:
            return
        handed = time.perf_counter()
        try:
            async with asyncio.timeout(self.publish_timeout):
                await self.publisher.publish_many(messages)
        except Exception as error:
            metrics.OUTBOX_PUBLISH_FAILURES.labels(self.service).inc(len(messages))
            self._failures.log(
                logging.WARNING,
                "publish",
                "outbox publish failed, the sweep will retry: %r",
                error,
                extra={"action": "outbox.publish_failed", "count": len(messages)},
            )
            return
        metrics.OUTBOX_PUBLISHED.labels(self.service).inc(len(messages))
        metrics.OUTBOX_RELAY_LAG.labels(self.service).observe(time.perf_counter() - handed)
        # Deleted later, in bulk. Should this process die first, the sweep publishes
        # them once more (every consumer is idempotent on its input) and deletes them.
        self.outbox.published(ids)

    async def sweep_once(self, limit: int = 500) -> int:
        """Publish rows left behind by writers that did not; how many."""

        async def publish(row: StaleOutboxRow) -> None:
            headers = dict(row.headers) if row.headers else None
            await self.publisher.publish(row.exchange, row.routing_key, row.body, headers=headers)

        published = await self.outbox.sweep(self.grace_seconds, limit, publish)
        if not published:
            return 0
        metrics.OUTBOX_SWEPT.labels(self.service).inc(len(published))
        lag = metrics.OUTBOX_SWEEP_LAG.labels(self.service)
        for row in published:
            lag.observe(row.age_seconds)
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
                await self.outbox.flush_published()
                while await self.sweep_once() > 0:
                    pass
            except asyncio.CancelledError:
                raise
            except Exception as error:
                self._failures.log(
                    logging.WARNING,
                    "sweep",
                    "outbox sweep failed: %r",
                    error,
                    extra={"action": "outbox.sweep_failed"},
                )
            await asyncio.sleep(self.sweep_interval)
