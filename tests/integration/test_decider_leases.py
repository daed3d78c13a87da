"""The decider partitions' leases in Postgres: the share, joins, stops, lapses, the count.

Each decider here is a :class:`PartitionLeases` whose take and give-up only
record what they are told, so the test drives the beats one by one; the
processes that really consume are tests/faults/test_decider_balance.py's.
"""

from __future__ import annotations

import asyncio

import pytest

from orbit_model.errors import ErrorCode, OrbitError
from orbit_services.decider.partitions import LeaseTimes, PartitionLeases
from orbit_services.store import EventStore
from orbit_services.store.leases import share

from .conftest import OrbitEnv
from .eventually import eventually

PARTITIONS = 8


class Recorder:
    """A decider's consumption as the leases drive it."""

    def __init__(self, store: EventStore, name: str, lease_seconds: float = 10.0) -> None:
        self.consumed: set[int] = set()
        self.given_up: list[frozenset[int]] = []
        self.leases = PartitionLeases(
            store.leases,
            name,
            PARTITIONS,
            LeaseTimes(lease_seconds),
            take=self._take,
            give_up=self._give_up,
        )

    async def _take(self, partition: int) -> None:
        self.consumed.add(partition)

    async def _give_up(self, partitions: frozenset[int]) -> None:
        self.consumed -= partitions
        self.given_up.append(partitions)


def test_the_share_is_even_and_sums_to_every_partition() -> None:
    for partitions in (1, 2, 7, 32, 100):
        for count in range(1, 40):
            members = [f"d{n:02}" for n in range(count)]
            shares = [share(partitions, members, member) for member in members]
            assert sum(shares) == partitions
            assert max(shares) - min(shares) <= 1
    # One not yet seen among the live counts itself in.
    assert share(4, ["a"], "b") == 2


async def _beat_all(*deciders: Recorder, rounds: int = 3) -> None:
    for _ in range(rounds):
        for decider in deciders:
            await decider.leases.beat()


def _assert_disjoint_and_balanced(*deciders: Recorder) -> None:
    held = [decider.consumed for decider in deciders]
    assert sum(len(h) for h in held) == PARTITIONS
    assert set().union(*held) == set(range(PARTITIONS))
    assert max(map(len, held)) - min(map(len, held)) <= 1, held


async def test_deciders_share_the_partitions_and_rebalance_on_join_and_stop(
    orbit_env: OrbitEnv,
) -> None:
    store = await EventStore.connect(orbit_env.settings.database_url)
    try:
        first = Recorder(store, "d-1")
        await first.leases.start()
        assert first.consumed == set(range(PARTITIONS))
        second, third = Recorder(store, "d-2"), Recorder(store, "d-3")
        await second.leases.start()
        await third.leases.start()
        # Nothing is taken from a live holder: the newcomers wait for what is given back.
        assert second.consumed == set()
        await _beat_all(first, second, third)
        _assert_disjoint_and_balanced(first, second, third)
        # What the first gave up, it gave up before the others took it.
        assert first.given_up
        await second.leases.stop()
        assert second.consumed == set()
        await _beat_all(first, third)
        _assert_disjoint_and_balanced(first, third)
        rows = await store.leases.partitions()
        owners = {row.partition: row.owner for row in rows}
        assert {owners[p] for p in first.consumed} == {"d-1"}
        assert {owners[p] for p in third.consumed} == {"d-3"}
        live = {row.decider_id for row in await store.leases.deciders(10.0) if row.live}
        assert live == {"d-1", "d-3"}
    finally:
        await store.close()


async def test_a_silent_deciders_leases_lapse_and_are_taken_over(orbit_env: OrbitEnv) -> None:
    store = await EventStore.connect(orbit_env.settings.database_url)
    try:
        lease = 1.0
        dead, alive = Recorder(store, "dead", lease), Recorder(store, "alive", lease)
        await dead.leases.start()
        await alive.leases.start()
        await _beat_all(dead, alive)
        _assert_disjoint_and_balanced(dead, alive)

        # The dead one beats no more (as after SIGKILL): once its leases lapse (the lease
        # time, by Postgres's clock), the other's next beat takes everything.
        async def dead_holds_nothing() -> bool:
            return all(row.owner != "dead" for row in await store.leases.partitions())

        await eventually(dead_holds_nothing, timeout=lease + 30, what="the dead one's leases lapse")
        await alive.leases.beat()
        assert alive.consumed == set(range(PARTITIONS))
        # Were it only frozen, its next beat finds its partitions gone and stops consuming
        # them, without giving anything back that is not its own.
        await dead.leases.beat()
        await dead.leases.beat()
        assert not (dead.consumed & alive.consumed)
        await _beat_all(alive, dead, rounds=2)  # it rejoins: the share is even again
        _assert_disjoint_and_balanced(dead, alive)
    finally:
        await store.close()


async def test_a_decider_with_another_partition_count_refuses_to_start(
    orbit_env: OrbitEnv,
) -> None:
    store = await EventStore.connect(orbit_env.settings.database_url)
    try:
        await store.leases.ensure_partitions(PARTITIONS)
        await store.leases.ensure_partitions(PARTITIONS)  # the same count again: fine
        with pytest.raises(OrbitError) as raised:
            await store.leases.ensure_partitions(PARTITIONS * 2)
        assert raised.value.code is ErrorCode.INVALID_SETTINGS
        assert f"has {PARTITIONS} decider partitions" in raised.value.message
    finally:
        await store.close()


async def test_deciders_starting_together_make_the_partitions_once(orbit_env: OrbitEnv) -> None:
    store = await EventStore.connect(orbit_env.settings.database_url)
    try:
        await asyncio.gather(*(store.leases.ensure_partitions(PARTITIONS) for _ in range(6)))
        assert [row.partition for row in await store.leases.partitions()] == list(range(PARTITIONS))
    finally:
        await store.close()
