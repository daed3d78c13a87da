"""Who waits for which execution to end, woken when the store says it ended.

A ``GET /v1/executions/{id}?wait=`` registers here before it reads the
execution's row, so an ending that commits between the read and the wait
still wakes it. The decider's append announces the executions that ended
(Postgres NOTIFY, delivered at commit to every gateway's LISTEN connection:
several gateway replicas each hear every ending); :meth:`Endings.ended`
sets their waiters' events, and each reads its row again. Nothing polls while
the connection is up; while it is down, and until it is back, waits poll.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterable, Iterator

from orbit_services.runtime import metrics


class Endings:
    """The waiters of each execution, as asyncio events; the event loop's only."""

    def __init__(self) -> None:
        self._waiters: dict[str, set[asyncio.Event]] = {}

    @property
    def waiting(self) -> int:
        """How many waits are registered."""
        return sum(len(events) for events in self._waiters.values())

    @contextlib.contextmanager
    def watch(self, execution_id: str) -> Iterator[asyncio.Event]:
        """An event that is set when ``execution_id`` may have ended, while in the block.

        Clear it before each look at the execution: an ending announced after the
        clear sets it again.
        """
        event = asyncio.Event()
        events = self._waiters.setdefault(execution_id, set())
        events.add(event)
        metrics.GATEWAY_WAITS.inc()
        try:
            yield event
        finally:
            metrics.GATEWAY_WAITS.dec()
            events.discard(event)
            if not events and self._waiters.get(execution_id) is events:
                del self._waiters[execution_id]

    def ended(self, execution_ids: Iterable[str]) -> None:
        """Wake the waiters of these executions."""
        for execution_id in execution_ids:
            for event in self._waiters.get(execution_id, ()):
                event.set()

    def wake_all(self) -> None:
        """Wake every waiter: an ending may have been missed (the listener was lost)."""
        for events in self._waiters.values():
            for event in events:
                event.set()
