"""Group commit: appends that arrive together share one transaction.

The gateway appends one execution at a time (a start, a signal, a cancel),
but many arrive at once under load; each alone would pay a transaction and a
round trip per statement. :class:`GroupCommit` gathers the appends that
arrive while a commit is in flight (or in the same turn of the event loop)
and writes them with one :meth:`Store.append` (:mod:`.interface`). Nothing is acknowledged
before its commit: each caller's ``append`` returns once the transaction
holding its events committed.

If the shared transaction fails (one append lost a race: an id that exists, a
seq someone else took; or one cannot be written at all), the group is written
again one append at a time, so each caller sees only its own append's error.
If Postgres is unavailable (``UNAVAILABLE``: down, frozen, out of disk), that is
no append's fault: every caller of the group gets the error at once, rather than
each in turn after the ones before it waited out their own timeouts.
"""

from __future__ import annotations

import asyncio
import contextlib

from orbit_model.errors import ErrorCode, OrbitError
from orbit_services.store.interface import Store
from orbit_services.store.rows import Append


class GroupCommit:
    """Appends through one store, many to a transaction.

    Args:
        store: Where the appends go.
        max_group: Appends written in one transaction at most.
    """

    def __init__(self, store: Store, max_group: int = 256) -> None:
        self.store = store
        self.max_group = max_group
        self._waiting: list[tuple[Append, asyncio.Future[list[int]]]] = []
        self._writer: asyncio.Task[None] | None = None

    async def append(self, append: Append) -> list[int]:
        """Write ``append`` durably; the ids of its outbox rows.

        Raises:
            AppendConflict: Its execution already had events past its expected seq
                (or, for a new one, exists already).
        """
        future: asyncio.Future[list[int]] = asyncio.get_running_loop().create_future()
        # A caller cancelled while its append is written does not read its outcome.
        future.add_done_callback(_consume_outcome)
        self._waiting.append((append, future))
        if self._writer is None:
            self._writer = asyncio.create_task(self._write(), name="group-commit")
        return await asyncio.shield(future)

    async def close(self, timeout: float = 10.0) -> None:
        """Let the group in flight finish (for ``timeout`` seconds at most)."""
        if self._writer is not None:
            with contextlib.suppress(Exception):
                async with asyncio.timeout(timeout):
                    await asyncio.shield(self._writer)

    async def _write(self) -> None:
        group: list[tuple[Append, asyncio.Future[list[int]]]] = []
        try:
            while self._waiting:
                await asyncio.sleep(0)  # callers of this same turn join the group
                group, self._waiting = (
                    self._waiting[: self.max_group],
                    self._waiting[self.max_group :],
                )
                await self._commit(group)
                group = []
        except asyncio.CancelledError:
            # Stopping: whoever still waits learns that its append may not be written.
            error = asyncio.CancelledError("the group commit was stopped")
            for _, future in (*group, *self._waiting):
                if not future.done():
                    future.set_exception(error)
            self._waiting = []
            raise
        finally:
            self._writer = None

    async def _commit(self, group: list[tuple[Append, asyncio.Future[list[int]]]]) -> None:
        if len(group) > 1:
            try:
                ids = await self.store.append([append for append, _ in group])
            except Exception as error:
                if isinstance(error, OrbitError) and error.code is ErrorCode.UNAVAILABLE:
                    for _, future in group:
                        _settle(future, error=error)
                    return
                # One append lost a race, or cannot be written at all: each on its own,
                # below, so that only its own caller sees the error.
            else:
                # Outbox ids come in the order of the appends' messages.
                start = 0
                for append, future in group:
                    end = start + len(append.outbox)
                    _settle(future, ids[start:end])
                    start = end
                return
        for append, future in group:
            try:
                _settle(future, await self.store.append([append]))
            except Exception as error:
                _settle(future, error=error)


def _consume_outcome(future: asyncio.Future[list[int]]) -> None:
    if not future.cancelled():
        future.exception()


def _settle(
    future: asyncio.Future[list[int]],
    result: list[int] | None = None,
    error: BaseException | None = None,
) -> None:
    if future.done():  # its caller was cancelled
        return
    if error is not None:
        future.set_exception(error)
    else:
        future.set_result(result or [])


__all__ = ["GroupCommit"]
