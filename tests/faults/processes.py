"""Orbit commands run as processes of their own, so a fault test can kill them."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import sys

from orbit_services.runtime.settings import Settings


def orbit_env_vars(settings: Settings, **extra: str) -> dict[str, str]:
    """The environment that points an `orbit` process at this test's Orbit."""
    return {
        **os.environ,
        "ORBIT_DATABASE_URL": settings.database_url,
        "ORBIT_AMQP_URL": settings.amqp_url,
        "ORBIT_BROKER_AUTH": settings.broker_auth,
        "ORBIT_NAMESPACE": settings.namespace,
        "ORBIT_DECIDER_PARTITIONS": str(settings.decider_partitions),
        "ORBIT_QUEUE_REPLICAS": str(settings.queue_replicas),
        "ORBIT_HEARTBEAT_INTERVAL_MS": str(settings.heartbeat_interval_ms),
        "ORBIT_SESSION_TIMEOUT_MS": str(settings.session_timeout_ms),
        "ORBIT_LOG_LEVEL": "WARNING",
        **extra,
    }


async def orbit_process(
    settings: Settings, *arguments: str, **extra: str
) -> asyncio.subprocess.Process:
    """``orbit ARGUMENTS…`` (as ``python -m orbit_sdk``) against this test's Orbit."""
    return await asyncio.create_subprocess_exec(
        sys.executable, "-m", "orbit_sdk", *arguments, env=orbit_env_vars(settings, **extra)
    )


async def stop_processes(*processes: asyncio.subprocess.Process, within: float = 30.0) -> None:
    """Stop ``processes`` (thawed first, should one be frozen): SIGTERM, and SIGKILL for
    one still running ``within`` seconds later."""
    for process in processes:
        if process.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                process.send_signal(signal.SIGCONT)
                process.terminate()
    for process in processes:
        try:
            async with asyncio.timeout(within):
                await process.wait()
        except TimeoutError:
            process.kill()
            await process.wait()
