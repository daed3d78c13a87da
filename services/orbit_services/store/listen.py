"""One LISTEN connection to Postgres, opened again when it drops.

A LISTEN is session state, which pooled connections never keep, so each
listener is a connection of its own outside the store's pool: the timer
service's (nearer timers, :data:`~.sql.timers.TIMERS_CHANNEL`) and the gateway's
(executions that ended, :data:`~.sql.executions.CLOSED_CHANNEL`). When the connection
drops it is opened again, with backoff, and the owner is told it is back: a
notification may have been missed meanwhile, so the owner looks again at
whatever it was waiting for.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable

import asyncpg

from orbit_services.store.pool import translated

log = logging.getLogger("orbit.store")

_CLOSE_SECONDS = 5.0
"""How long closing the connection may take before it is closed hard."""
_MAX_BACKOFF_SECONDS = 5.0


class Listener:
    """Calls ``on_payload(payload)`` for each notification on ``channel``.

    Args:
        url: The database.
        channel: The channel to LISTEN on.
        name: Its ``application_name``, as ``pg_stat_activity`` shows it.
        on_payload: Called with each notification's payload, in the event loop.
        on_back: Called each time a lost connection is open and listening again.
    """

    def __init__(
        self,
        url: str,
        channel: str,
        name: str,
        on_payload: Callable[[str], None],
        on_back: Callable[[], None],
    ) -> None:
        self._url = url
        self._channel = channel
        self._name = name
        self._on_payload = on_payload
        self._on_back = on_back
        self._connection: asyncpg.Connection | None = None
        self._reopening: asyncio.Task[None] | None = None
        self._closing = False

    async def open(self) -> None:
        """Connect and LISTEN.

        Raises:
            OrbitError: ``UNAVAILABLE`` if Postgres cannot be reached.
        """
        with translated():
            connection = await asyncpg.connect(
                self._url, server_settings={"application_name": self._name}
            )
        try:
            with translated():
                await connection.add_listener(self._channel, self._notified)
        except BaseException:
            await connection.close()
            raise
        # A drop in the instant before this is left to the owner's own safety net.
        connection.add_termination_listener(self._lost)
        self._connection = connection

    @property
    def listening(self) -> bool:
        """Whether the connection is open and listening: no notification is being missed."""
        return (
            self._connection is not None
            and not self._connection.is_closed()
            and self._reopening is None
        )

    def _notified(self, _connection: object, _pid: int, _channel: str, payload: object) -> None:
        self._on_payload(str(payload))

    def _lost(self, _connection: object) -> None:
        if self._closing or self._reopening is not None:
            return
        self._connection = None
        log.warning(
            "the LISTEN connection %s to Postgres was lost; opening it again",
            self._name,
            extra={"action": "store.listen_lost", "listener": self._name},
        )
        self._reopening = asyncio.get_running_loop().create_task(
            self._reopen(), name=f"listen.{self._name}"
        )

    async def _reopen(self) -> None:
        delay = 0.1
        try:
            while not self._closing:
                try:
                    await self.open()
                except Exception as error:
                    log.warning(
                        "listening again failed, retrying in %.1f s: %r",
                        delay,
                        error,
                        extra={"action": "store.listen_failed", "listener": self._name},
                    )
                    await asyncio.sleep(delay)
                    delay = min(delay * 2, _MAX_BACKOFF_SECONDS)
                else:
                    self._on_back()
                    return
        finally:
            self._reopening = None

    async def close(self) -> None:
        """Stop listening and close the connection (hard, if Postgres does not answer in 5 s)."""
        self._closing = True
        if self._reopening is not None:
            self._reopening.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._reopening
        connection = self._connection
        if connection is not None and not connection.is_closed():
            try:
                async with asyncio.timeout(_CLOSE_SECONDS):
                    await connection.close()
            except (TimeoutError, OSError, asyncpg.PostgresError):
                connection.terminate()
        self._connection = None
