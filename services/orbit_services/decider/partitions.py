"""Which partitions of the decider queue this decider consumes, kept by leases in Postgres.

About once a second :class:`PartitionLeases` beats (``store.leases``): the
beat renews what this decider holds and claims free partitions up to its
share of the live deciders. The difference from what it consumes is then
acted on:

- a partition claimed is **taken**: its queue is consumed;
- a partition beyond the share is **given up**: its consumer is cancelled, the
  batch in hand finishes, what was received of it and not decided goes back
  to the queue, its cached states are dropped, and only then is its lease
  released, so the next holder starts from the history;
- a partition whose lease was taken by another (this decider was cut off from
  Postgres for longer than the lease) is given up the same way, not released;
- when no beat has succeeded for most of the lease time, everything is given
  up: another decider may hold those leases soon, and a decider that cannot
  reach Postgres cannot decide anything anyway. A beat that hangs (a silent
  link) fails after half that time, and no beat renews while RabbitMQ is
  unreachable: a decider cut off from either gives its partitions up.

Correctness never depends on any of this: the ``(execution_id, seq)`` key of the
history decides between two deciders that meet. The partition queues keep
RabbitMQ's single active consumer as well, so even a decider that froze
while holding a partition never consumes beside its successor.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from orbit_model.errors import ErrorCode, OrbitError
from orbit_services.runtime import metrics
from orbit_services.store.leases import LeaseStore

log = logging.getLogger("orbit.decider")

BEATS_PER_LEASE = 10
"""Beats in one lease time: a lease survives nine missed beats in a row."""
FENCE_FRACTION = 0.7
"""Without a beat for this share of the lease time, give everything up."""


@dataclass(frozen=True)
class LeaseTimes:
    """The lease time and what follows from it."""

    lease_seconds: float

    @property
    def beat_seconds(self) -> float:
        return self.lease_seconds / BEATS_PER_LEASE

    @property
    def fence_seconds(self) -> float:
        return self.lease_seconds * FENCE_FRACTION

    @property
    def beat_timeout(self) -> float:
        """How long one beat may take: half the fence time, so that a beat that hangs
        (a silent link to Postgres) fails in time for the fence to come when due."""
        return self.fence_seconds / 2

    @property
    def amqp_heartbeat_seconds(self) -> int:
        """The decider's AMQP heartbeat: a frozen or cut-off decider loses its connection,
        and with it its partitions' queues, within about twice this: a lease."""
        return max(1, int(self.lease_seconds / 2))


Take = Callable[[int], Awaitable[None]]
GiveUp = Callable[[frozenset[int]], Awaitable[None]]


class PartitionLeases:
    """Beats, and takes or gives up partitions as the leases say.

    Args:
        leases: The store's lease tables.
        decider_id: This decider's id (unique among the installation's deciders).
        partitions: The installation's partition count.
        times: The lease time.
        take: Starts consuming one partition; may raise (it is tried again next beat).
        give_up: Stops consuming partitions, finishes their batch and drops their
            states; never raises.
        reachable: Whether RabbitMQ is reachable now: while it is not, no beat renews
            (a decider cut off from RabbitMQ cannot consume its partitions).
    """

    def __init__(
        self,
        leases: LeaseStore,
        decider_id: str,
        partitions: int,
        times: LeaseTimes,
        *,
        take: Take,
        give_up: GiveUp,
        reachable: Callable[[], bool] = lambda: True,
    ) -> None:
        self.leases = leases
        self.decider_id = decider_id
        self.partitions = partitions
        self.times = times
        self._take = take
        self._give_up = give_up
        self._reachable = reachable
        self.consumed: set[int] = set()
        """The partitions whose queues this decider consumes now."""
        self._last_beat = time.monotonic()

    async def start(self) -> None:
        """Check the partition count and take a first share (none, if Postgres is away:
        the beats take it later).

        Raises:
            OrbitError: ``INVALID_SETTINGS`` if the installation has another count.
        """
        await self.leases.ensure_partitions(self.partitions)
        await self.beat()

    async def run(self) -> None:
        """Beat until cancelled."""
        while True:
            await asyncio.sleep(self.times.beat_seconds)
            await self.beat()

    async def beat(self) -> None:
        """One beat, and what it calls for. Never raises but for cancellation.

        A beat renews only while this decider can do the work the leases give it: it
        reaches RabbitMQ, and Postgres answers within :attr:`LeaseTimes.beat_timeout`.
        Otherwise it is missed, and past the fence time everything is given up.
        """
        if not self._reachable():
            await self._missed("RabbitMQ is not reachable")
            return
        try:
            async with asyncio.timeout(self.times.beat_timeout):
                beat = await self.leases.beat(
                    self.decider_id, self.partitions, self.times.lease_seconds
                )
        except TimeoutError:
            await self._missed("Postgres did not answer the beat in time")
            return
        except OrbitError as error:
            if error.code is not ErrorCode.UNAVAILABLE:
                log.exception("a lease beat failed", extra={"action": "decider.beat_failed"})
            await self._missed(error.message)
            return
        self._last_beat = time.monotonic()
        lost = frozenset(self.consumed - beat.held)
        if lost:
            log.warning(
                "partitions %s were taken over by another decider",
                sorted(lost),
                extra={"action": "decider.partitions_lost"},
            )
            await self._stop_consuming(lost)
        for partition in sorted(beat.held - self.consumed):
            try:
                await self._take(partition)
            except OrbitError as error:
                log.warning(
                    "consuming partition %d failed (tried again at the next beat): %r",
                    partition,
                    error,
                    extra={"action": "decider.take_failed"},
                )
                continue
            self.consumed.add(partition)
            metrics.DECIDER_HANDOVERS.labels("taken").inc()
        await self._give_back_extra(beat.held, beat.share)

    async def _missed(self, why: str) -> None:
        """A beat did not renew: past the fence time without one, give everything up (the
        leases lapse, and another decider may hold them soon)."""
        silent = time.monotonic() - self._last_beat
        if silent > self.times.fence_seconds and self.consumed:
            log.warning(
                "no lease beat for %.1f s (%s): giving up partitions %s",
                silent,
                why,
                sorted(self.consumed),
                extra={"action": "decider.fenced"},
            )
            await self._stop_consuming(frozenset(self.consumed))

    async def _give_back_extra(self, held: frozenset[int], share: int) -> None:
        """Give back what exceeds the share: the highest partitions, so that who holds
        what changes no more than the balance needs."""
        extra = frozenset(sorted(held, reverse=True)[: max(0, len(held) - share)])
        if not extra:
            return
        log.info(
            "giving partitions %s to other deciders (share %d)",
            sorted(extra),
            share,
            extra={"action": "decider.partitions_given"},
        )
        await self._stop_consuming(extra & self.consumed)
        try:
            await self.leases.release(self.decider_id, extra)
        except OrbitError as error:
            # The leases lapse by themselves; until then nobody consumes them.
            log.warning(
                "releasing partitions failed: %r", error, extra={"action": "decider.release_failed"}
            )

    async def _stop_consuming(self, partitions: frozenset[int]) -> None:
        if not partitions:
            return
        self.consumed -= partitions
        metrics.DECIDER_HANDOVERS.labels("given").inc(len(partitions))
        await self._give_up(partitions)

    async def stop(self) -> None:
        """Stop consuming everything and leave, so that the others take over at once."""
        await self._stop_consuming(frozenset(self.consumed))
        try:
            await self.leases.leave(self.decider_id)
        except OrbitError as error:
            log.warning(
                "leaving the deciders failed (the leases lapse instead): %r",
                error,
                extra={"action": "decider.leave_failed"},
            )


__all__ = ["LeaseTimes", "PartitionLeases"]
