"""A decider cut off silently in the middle of a lease beat keeps no lease row locked.

CI caught a decider cut off from Postgres whose partition no other decider took for
the whole 45 s cut (``test_decider_stalls``, one run in many on a busy machine). The
cut had come between a beat's statements and its ``COMMIT``: the server kept that
transaction open, waiting for a client that could no longer reach it, and with it the
lock on the partition's lease row, which every other decider's claim skips (``FOR
UPDATE SKIP LOCKED``). The lease lapsed, and still nobody could take it.

Here the cut comes exactly there, every time (the proxy cuts when the ``COMMIT`` is
sent), and another decider claims the partition once the lease lapses: Postgres ends
a transaction that waits on its client for longer than the beat's bound
(``idle_in_transaction_session_timeout``).
"""

from __future__ import annotations

import asyncio
from urllib.parse import urlsplit

import pytest

from orbit_model.errors import OrbitError
from orbit_services.store.leases import LeaseStore
from tests.integration.conftest import OrbitEnv
from tests.integration.eventually import eventually

from .proxy import SilentProxy

LEASE_SECONDS = 1.0
BEAT_TIMEOUT = 0.5
"""The cut-off decider's bound on a beat's statements (a decider's is half its fence)."""
CLAIMED_WITHIN = 60.0
"""Generous: the lease and the bound above take 1.5 s on an idle machine."""


@pytest.mark.timeout(300)
async def test_a_beat_cut_off_before_its_commit_leaves_the_lease_to_be_claimed(
    orbit_env: OrbitEnv,
) -> None:
    url = orbit_env.settings.database_url
    proxy = SilentProxy(int(urlsplit(url).port or 0))
    await proxy.start()
    cut_off = await LeaseStore.open(proxy.address(url), BEAT_TIMEOUT)
    other = await LeaseStore.open(url, 5.0)
    try:
        await cut_off.ensure_partitions(1)
        first = await cut_off.beat("cut-off", 1, LEASE_SECONDS)
        assert first.held == frozenset({0})

        proxy.cut_when_sent(b"COMMIT")
        with pytest.raises((OrbitError, TimeoutError)):
            async with asyncio.timeout(10 * BEAT_TIMEOUT):
                await cut_off.beat("cut-off", 1, LEASE_SECONDS)

        claimed = await eventually(
            lambda: other.beat("other", 1, LEASE_SECONDS),
            lambda beat: beat.held == frozenset({0}),
            timeout=CLAIMED_WITHIN,
            interval=LEASE_SECONDS / 10,
            what="the other decider holding the partition the cut-off one held",
        )
        assert claimed.share == 1
    finally:
        await cut_off.close()
        await other.close()
        await proxy.stop()
