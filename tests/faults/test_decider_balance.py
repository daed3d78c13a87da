"""Deciders share the 32 partitions: balanced at start, after a join, a SIGKILL, a SIGTERM.

Three decider processes start and share them as 11, 11 and 10. A fourth
joins; each then holds 8. One is SIGKILLed; once its lease (10 s, the
default) lapses, the other three hold everything again. One is stopped with
SIGTERM; it gives its partitions back as it leaves (when it has exited it
holds none: no lease has to lapse), and the two left hold 16 each.
Throughout, the broker's own consumer list (``rabbitmqctl list_consumers``,
live, not the management plugin's sampled statistics) never shows two
consumers on one partition queue. Who holds what is read where an operator
reads it: the gateway's ``GET /v1/deciders``.

The waits are bounded by events and the lease time, never by how fast this
machine is: a decider process is first waited for until it beats (Python's
start takes seconds on a loaded machine), and only then is the rebalance
bounded, by a few lease times.
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

import pytest

from orbit_sdk.client import OrbitClient
from orbit_services.runtime.settings import Settings
from tests.e2e.stack import running_stack
from tests.integration.conftest import OrbitEnv
from tests.integration.eventually import eventually

from .processes import orbit_process

PARTITIONS = 32
LEASE_SECONDS = 10.0
"""The default ``ORBIT_DECIDER_LEASE_MS``: the test proves the default."""
START_WITHIN = 120.0
"""Seconds for a decider process to start and beat: seconds on a loaded machine;
only a decider that never comes waits this long."""
SETTLE_WITHIN = 3 * LEASE_SECONDS
"""Seconds for a rebalance once the deciders are known: a few beats (a tenth of
the lease each), generously, since a loaded machine delays beats."""


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

    async def sampled_again(self) -> None:
        """Returns once a sample was taken after the call: each state the test reaches
        is seen by the watch, however slowly ``rabbitmqctl`` starts on a loaded machine."""
        taken = self.samples

        async def samples() -> int:
            return self.samples

        # One sample after this one began, so that it read the broker after the call.
        await eventually(samples, lambda n: n >= taken + 2, timeout=120, what="a new sample")


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


def _live(found: dict[str, Any]) -> list[dict[str, Any]]:
    return [decider for decider in found["deciders"] if decider["live"]]


def _balanced(live: int) -> Any:
    def check(found: dict[str, Any]) -> bool:
        shares = [len(d["partitions"]) for d in _live(found)]
        return bool(found["balanced"]) and len(shares) == live and sum(shares) == PARTITIONS

    return check


async def _wait_balanced(
    client: OrbitClient, live: int, what: str, within: float = SETTLE_WITHIN
) -> float:
    """Waits until ``live`` deciders beat, then until they share the partitions evenly;
    the seconds the second wait took."""
    await eventually(
        client.deciders,
        lambda found: len(_live(found)) == live,
        timeout=START_WITHIN,
        interval=0.1,
        what=f"{live} live deciders",
    )
    started = time.monotonic()
    await eventually(client.deciders, _balanced(live), timeout=within, interval=0.1, what=what)
    return time.monotonic() - started


def _held_by(found: dict[str, Any], pid: int) -> list[int]:
    return [p for d in found["deciders"] if d["pid"] == pid for p in d["partitions"]]


@pytest.mark.timeout(600)  # generous: only a failing run comes near it
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
            await watch.sampled_again()

            deciders.append(await orbit_process(settings, "service", "decider"))
            joined = await _wait_balanced(client, 4, "four deciders after a join")
            found = await client.deciders()
            assert [len(d["partitions"]) for d in found["deciders"]] == [8, 8, 8, 8]
            await watch.sampled_again()

            victim = deciders.pop(0)
            assert _held_by(await client.deciders(), victim.pid) != []
            victim.send_signal(signal.SIGKILL)
            await victim.wait()
            killed = time.monotonic()
            # Its leases lapse after the lease time; the others claim them at a next beat.
            await eventually(
                client.deciders,
                _balanced(3),
                timeout=LEASE_SECONDS + SETTLE_WITHIN,
                interval=0.1,
                what="the others taking over a killed decider's partitions",
            )
            taken_over = time.monotonic() - killed
            # The three left share the 32 as 11, 11 and 10; nothing is left unowned.
            found = await client.deciders()
            assert found["unowned"] == []
            await watch.sampled_again()

            # A graceful stop gives everything back as it leaves: once it has exited it
            # holds nothing, so no lease has to lapse for the others to take over.
            leaving = deciders.pop(0)
            assert _held_by(await client.deciders(), leaving.pid) != []
            leaving.send_signal(signal.SIGTERM)
            assert await asyncio.wait_for(leaving.wait(), timeout=START_WITHIN) == 0
            assert _held_by(await client.deciders(), leaving.pid) == []
            stopped = await _wait_balanced(client, 2, "two deciders after a graceful stop")
            await watch.sampled_again()
            print(
                f"join balanced in {joined:.1f} s; a kill taken over in {taken_over:.1f} s;"
                f" a graceful stop in {stopped:.1f} s; {watch.samples} consumer samples"
            )
            assert watch.doubled == [], watch.doubled[:3]
    finally:
        for decider in deciders:
            if decider.returncode is None:
                decider.send_signal(signal.SIGTERM)
        for decider in deciders:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(decider.wait(), timeout=15)
