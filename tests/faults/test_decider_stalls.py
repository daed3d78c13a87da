"""A decider frozen, or cut off silently from RabbitMQ or Postgres, stalls its partitions
for about a lease, not for as long as the fault lasts (docs/scaling.md, "What bounds
the stall").

A chaos run (issue 32) found each fault stalling one decider's partitions for its whole
length:

- frozen by SIGSTOP (item 4): its lease moved at 10 s, but RabbitMQ kept the frozen
  process's consumer active on its single-active-consumer queues for the whole 25 s
  or 150 s;
- cut from RabbitMQ only by a proxy that silently drops packets (item 2): it renewed
  its leases for all 75 s of the cut, and 228 executions waited up to 77.7 s;
- cut from Postgres only (item 3): its leases lapsed at 10 s, but its consumers stayed
  the queues' active ones for the whole 40 s, as a beat over a silent link never
  raised.

Here two decider processes share the partitions with a lease of 3 s. One of them is
frozen, or reaches RabbitMQ or Postgres through :class:`~.proxy.SilentProxy` whose
link is cut, for far longer than a lease, while executions start on every partition:
each completes within the bound while the fault lasts, and once it ends nothing has
run twice.
"""

from __future__ import annotations

import asyncio
import signal
import time
from collections import Counter
from collections.abc import AsyncIterator, Callable
from urllib.parse import urlsplit

import pytest

from orbit_model.events import StepSucceeded
from orbit_services.store import EventStore
from tests.database import Database
from tests.e2e.stack import Stack, running_stack
from tests.integration.conftest import OrbitEnv
from tests.integration.eventually import eventually
from tests.views import as_sent

from .processes import orbit_process, stop_processes
from .proxy import SilentProxy
from .workflows import THREE_STEPS_YAML, greet

LEASE_MS = 3_000
FAULT_SECONDS = 15 * LEASE_MS / 1000
"""How long each fault lasts: the stall it used to cause."""
BOUND_SECONDS = 30.0
"""The longest an execution started during a fault may take (the issue's bound): a
lease, the heartbeats or the beat's bound that notice the fault, a beat, then its three
steps, with a wide margin for a busy machine (3 to 10 s on an idle one)."""
EXECUTIONS = 32
START_WITHIN = 120.0


async def _holders(database: Database) -> dict[str, int]:
    """The partitions each decider holds a live lease on."""
    rows = await database.fetch(
        "SELECT owner, count(*) AS n FROM decider_partitions"
        " WHERE lease_until > now() GROUP BY owner"
    )
    return {row["owner"]: int(row["n"]) for row in rows}


@pytest.fixture
async def stack(orbit_env: OrbitEnv) -> AsyncIterator[Stack]:
    settings = orbit_env.settings_with(decider_lease_ms=LEASE_MS)
    async with running_stack(settings, [greet], services=("dispatcher", "timer", "gateway")) as s:
        await s.client.deploy(THREE_STEPS_YAML)
        yield s


Fault = Callable[[asyncio.subprocess.Process], None]


async def _stalled_for(stack: Stack, label: str, begin: Fault, end: Fault, **faulty: str) -> None:
    """Run two deciders, the faulty one with these ``ORBIT_*`` variables; ``begin`` its
    fault, start executions, ``end`` it, and hold each execution to the bound."""
    settings = stack.settings
    lease = {"ORBIT_DECIDER_LEASE_MS": str(LEASE_MS)}
    deciders = (
        await orbit_process(
            settings, "service", "decider", ORBIT_DECIDER_ID="faulty", **lease, **faulty
        ),
        await orbit_process(settings, "service", "decider", ORBIT_DECIDER_ID="other", **lease),
    )
    database = Database(settings.database_url)
    client = stack.client
    try:
        await eventually(
            lambda: _holders(database),
            lambda held: held.get("faulty", 0) > 0 and held.get("other", 0) > 0,
            timeout=START_WITHIN,
            what="both deciders holding partitions",
        )
        await client.start("three-steps", {"name": "x"}, execution_id=f"{label}-warm", wait=True)
        begin(deciders[0])
        try:
            began = time.monotonic()
            ids = [f"{label}-{n}" for n in range(EXECUTIONS)]
            for n in ids:
                await client.start("three-steps", {"name": n}, execution_id=n)
            ended = await asyncio.gather(
                *(as_sent(client.wait(i, timeout=FAULT_SECONDS)) for i in ids),
                return_exceptions=True,
            )
            took = time.monotonic() - began
        finally:
            end(deciders[0])
        print(f"{label}: {EXECUTIONS} executions started meanwhile ended within {took:.1f} s")
        statuses = [e["status"] if isinstance(e, dict) else repr(e) for e in ended]
        assert statuses == ["completed"] * EXECUTIONS, statuses
        assert took < BOUND_SECONDS, f"{took:.1f} s"
        store = await EventStore.connect(settings.database_url, min_size=1, max_size=1)
        try:
            for execution_id in ids:
                events = [s.event for s in await store.read_events(execution_id)]
                succeeded = Counter(e.unit for e in events if isinstance(e, StepSucceeded))
                assert succeeded == {"a": 1, "b": 1, "c": 1}, (execution_id, succeeded)
        finally:
            await store.close()
    finally:
        await stop_processes(*deciders)


@pytest.mark.timeout(600)  # generous: only a failing run comes near it
async def test_a_frozen_decider_stalls_its_partitions_for_about_a_lease(stack: Stack) -> None:
    await _stalled_for(
        stack,
        "frozen",
        lambda decider: decider.send_signal(signal.SIGSTOP),
        lambda decider: decider.send_signal(signal.SIGCONT),
    )


@pytest.mark.timeout(600)  # generous: only a failing run comes near it
@pytest.mark.parametrize("through", ["rabbitmq", "postgres"])
async def test_a_decider_cut_off_silently_gives_its_partitions_up(
    stack: Stack, through: str
) -> None:
    settings = stack.settings
    url = settings.amqp_url if through == "rabbitmq" else settings.database_url
    proxy = SilentProxy(int(urlsplit(url).port or 0))
    await proxy.start()
    variable = "ORBIT_AMQP_URL" if through == "rabbitmq" else "ORBIT_DATABASE_URL"
    try:
        await _stalled_for(
            stack,
            f"cut-{through}",
            lambda _: proxy.cut(),
            lambda _: proxy.mend(),
            **{variable: proxy.address(url)},
        )
    finally:
        await proxy.stop()
