"""Worker liveness: sessions not heard from within the session timeout are lost.

Each task a lost session held at its last heartbeat is reported to the
decider as a ``DeliveryLost``: the attempt becomes uncertain and is
redelivered with the same idempotency key and ``redelivery: true``. The
report is published inside the transaction that closes the sessions, so a
failed publish leaves them open to be expired again.
"""

from __future__ import annotations

import asyncio
import logging

from orbit_model.messages import DeliveryLost, InflightTask
from orbit_model.topology import Topology
from orbit_sdk.amqp import Publisher
from orbit_sdk.logs import LogThrottle
from orbit_services.store import EventStore, OutboxMessage

log = logging.getLogger("orbit.timer")


class Liveness:
    """Expires silent worker sessions, every quarter of the session timeout.

    Args:
        store: Where the sessions are.
        publisher: Sends the ``DeliveryLost`` notices.
        topology: Routes each notice to its execution's partition.
        timeout_ms: The session timeout.
    """

    def __init__(
        self, store: EventStore, publisher: Publisher, topology: Topology, timeout_ms: int
    ) -> None:
        self.store = store
        self.publisher = publisher
        self.topology = topology
        self.timeout_ms = timeout_ms
        self._failures = LogThrottle(log)
        self.expired = 0
        """Worker sessions expired so far."""

    async def _report(self, lost: list[tuple[str, InflightTask]]) -> None:
        messages = []
        for worker_id, task in lost:
            notice = DeliveryLost(
                execution_id=task.execution_id,
                token=task.token,
                reason=f"worker {worker_id} was not heard from for {self.timeout_ms} ms",
            )
            messages.append(
                OutboxMessage.to(self.topology.decider_route(task.execution_id), notice)
            )
        await self.publisher.publish_many(messages)

    async def expire_once(self) -> int:
        """Expire the sessions silent for too long now; how many."""
        expired = await self.store.sessions.expire(self.timeout_ms, self._report)
        if expired:
            self.expired += expired
            log.warning("%d worker sessions expired", expired, extra={"action": "sessions.expired"})
        return expired

    async def run(self) -> None:
        """Expire sessions until cancelled; a failed pass is logged and tried again."""
        while True:
            try:
                await self.expire_once()
            except asyncio.CancelledError:
                raise
            except Exception as error:
                self._failures.log(
                    logging.WARNING,
                    "expire",
                    "expiring sessions failed: %r",
                    error,
                    extra={"action": "sessions.failed"},
                )
            # A quarter of the timeout: a lost worker is noticed within 1.25 timeouts.
            await asyncio.sleep(max(self.timeout_ms / 4, 50) / 1000)
