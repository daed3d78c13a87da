"""Deciders share the 32 partitions: balanced at start, after a join, a SIGKILL, a SIGTERM.

Three decider processes start; within 10 s each holds 10 or 11 partitions.
A fourth joins; within 10 s each holds 8. One is SIGKILLed; within the lease
time (10 s, the default) the other three hold everything again. One is
stopped with SIGTERM; it gives its partitions back as it leaves, and the two
left hold 16 each within a few seconds. Throughout,
the broker's own consumer list (``rabbitmqctl list_consumers``, live, not the
management plugin's sampled statistics) never shows two consumers on one
partition queue. Who holds what is read where an operator reads it: the
gateway's ``GET /v1/deciders``.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
import subprocess
import time
from collections import Counter
from collections.abc import AsyncIterator
from typing import Any

from orbit_sdk.client import OrbitClient
from orbit_services.runtime.settings import Settings
from tests.e2e.stack import running_stack
from tests.integration.conftest import OrbitEnv
from tests.integration.eventually import eventually

from .processes import orbit_process

PARTITIONS = 32
LEASE_SECONDS = 10.0
"""The default ``ORBIT_DECIDER_LEASE_MS``: the test proves the default."""
BALANCE_WITHIN = 10.0


def _consumers_per_queue(prefix: str) -> Counter[str]:
    """Consumers of each of the namespace's decider queues, as the broker has them now."""
    listed = subprocess.run(
        ["rabbitmqctl", "list_consumers", "-p", "/", "-q", "--no-table-headers", "queue_name"],
        check=True,
        capture_output=True,
        text=True,
        timeout=30,
    )
    return Counter(line.strip() for line in listed.stdout.splitlines() if line.startswith(prefix))


class ConsumerWatch:
    """Samples the consumer list while the test runs; remembers the worst it saw."""

    def __init__(self, prefix: str) -> None:
        self.prefix = prefix
        self.samples = 0
        self.doubled: list[Counter[str]] = []

    async def run(self) -> None:
        while True:
            counts = await asyncio.to_thread(_consumers_per_queue, self.prefix)
            self.samples += 1
            if any(count > 1 for count in counts.values()):
                self.doubled.append(counts)
            await asyncio.sleep(0.2)


@contextlib.asynccontextmanager
async def watching(prefix: str) -> AsyncIterator[ConsumerWatch]:
    watch = ConsumerWatch(prefix)
    task = asyncio.create_task(watch.run())
    try:
        yield watch
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


def _balanced(live: int) -> Any:
    def check(found: dict[str, Any]) -> bool:
        shares = [len(d["partitions"]) for d in found["deciders"] if d["live"]]
        return bool(found["balanced"]) and len(shares) == live and sum(shares) == PARTITIONS

    return check


async def _wait_balanced(client: OrbitClient, live: int, what: str) -> float:
    started = time.monotonic()
    await eventually(
        client.deciders, _balanced(live), timeout=BALANCE_WITHIN, interval=0.1, what=what
    )
    return time.monotonic() - started


async def test_deciders_stay_balanced_through_a_join_and_a_kill(orbit_env: OrbitEnv) -> None:
    settings: Settings = orbit_env.settings_with(decider_partitions=PARTITIONS)
    deciders: list[asyncio.subprocess.Process] = []
    try:
        async with (
            running_stack(settings, services=("gateway",)) as stack,
            watching(f"{settings.namespace}.decider.") as watch,
        ):
            client = stack.client
            for _ in range(3):
                deciders.append(await orbit_process(settings, "service", "decider"))
            await _wait_balanced(client, 3, "three deciders sharing 32 partitions")
            found = await client.deciders()
            assert sorted(len(d["partitions"]) for d in found["deciders"]) == [10, 11, 11]
            queues = await asyncio.to_thread(_consumers_per_queue, watch.prefix)
            assert sorted(queues) == sorted(
                f"{settings.namespace}.decider.{p}" for p in range(PARTITIONS)
            )

            deciders.append(await orbit_process(settings, "service", "decider"))
            joined = await _wait_balanced(client, 4, "four deciders after a join")
            found = await client.deciders()
            assert [len(d["partitions"]) for d in found["deciders"]] == [8, 8, 8, 8]

            victim = deciders.pop(0)
            victim.send_signal(signal.SIGKILL)
            await victim.wait()
            killed = time.monotonic()
            await eventually(
                client.deciders,
                _balanced(3),
                timeout=LEASE_SECONDS + 2,
                interval=0.1,
                what="the others taking over a killed decider's partitions",
            )
            taken_over = time.monotonic() - killed
            assert taken_over <= LEASE_SECONDS + 1.5  # the lease, and one beat to claim
            # The three left share the 32 as 11, 11 and 10; nothing is left unowned.
            found = await client.deciders()
            assert found["unowned"] == []

            # A graceful stop gives everything back at once: no lease has to lapse.
            leaving = deciders.pop(0)
            leaving.send_signal(signal.SIGTERM)
            assert await asyncio.wait_for(leaving.wait(), timeout=15) == 0
            stopped = await _wait_balanced(client, 2, "two deciders after a graceful stop")
            print(
                f"join balanced in {joined:.1f} s; a kill taken over in {taken_over:.1f} s;"
                f" a graceful stop in {stopped:.1f} s"
            )
            assert stopped < 5
            assert watch.samples > 10
            assert watch.doubled == [], watch.doubled[:3]
    finally:
        for decider in deciders:
            if decider.returncode is None:
                decider.send_signal(signal.SIGTERM)
        for decider in deciders:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(decider.wait(), timeout=15)
