"""``orbit broker user add|delete`` for a worker: its task patterns, kept in Postgres too.

RabbitMQ holds a worker user's patterns as its read permission, which only
the broker's administrator can read; the dispatcher reads them from the
``worker_users`` table to refuse at registration a contract the user could
not consume (``TASK_NOT_PERMITTED``, docs/protocol.md 6.5). The user is made
in RabbitMQ whether or not this works: when Postgres cannot be reached (or
is not migrated), a warning says that the check will not be made for it.
"""

from __future__ import annotations

import sys
from collections.abc import Awaitable, Callable, Sequence

from orbit_model.errors import OrbitError
from orbit_sdk.lifecycle import run
from orbit_services.runtime.settings import Settings
from orbit_services.store import EventStore
from orbit_services.store.worker_users import WorkerUsers


def _on_worker_users(
    settings: Settings, user: str, work: Callable[[WorkerUsers], Awaitable[None]]
) -> bool:
    """Run ``work`` on the table; False (with a warning on stderr) when it failed."""

    async def go() -> None:
        store = await EventStore.connect(settings.database_url, min_size=1, max_size=1)
        try:
            await work(store.worker_users)
        finally:
            await store.close()

    try:
        run(go())
    except OrbitError as error:
        sys.stderr.write(
            f"warning: the task patterns of {user} are not recorded in Postgres"
            f" ({error.code}: {error.message}); the dispatcher cannot refuse a registration"
            " outside them, and RabbitMQ refuses the worker's consume instead. Run"
            " `orbit migrate` (ORBIT_DATABASE_URL) and this command again.\n"
        )
        return False
    return True


def record_tasks(settings: Settings, user: str, tasks: Sequence[str]) -> bool:
    """Record the worker ``user``'s task patterns; whether that worked."""
    return _on_worker_users(settings, user, lambda users: users.record(user, tasks))


def forget_tasks(settings: Settings, user: str) -> bool:
    """Forget the worker ``user``'s task patterns; whether that worked."""
    return _on_worker_users(settings, user, lambda users: users.forget(user))
