"""The outbox relay publishes and deletes rows a writer left behind; a stuck row holds none up."""

from __future__ import annotations

import aio_pika

from orbit_runtime.broker import Publisher, declare_topology, open_channel
from orbit_runtime.broker import connect as connect_broker
from orbit_runtime.outbox import OutboxRelay
from orbit_runtime.store import EventStore

from .conftest import OrbitEnv
from .eventually import eventually


async def test_the_sweep_publishes_rows_left_behind(orbit_env: OrbitEnv) -> None:
    topology = orbit_env.topology
    store = await EventStore.connect(orbit_env.settings.database_url)
    connection = await connect_broker(orbit_env.settings.amqp_url)
    try:
        channel = await open_channel(connection)
        await declare_topology(channel, topology)
        relay = OutboxRelay(store, Publisher(channel), grace_seconds=5)
        async with store.pool.acquire() as db:
            await db.execute(
                "INSERT INTO outbox (exchange, routing_key, body, created_at) VALUES"
                " ($1, 'dispatch', 'left behind', now() - interval '1 minute'),"
                # A partition that does not exist (the partition count was changed):
                # unroutable, so returned by the broker.
                " ($2, '99', 'stuck', now() - interval '1 minute'),"
                " ($1, 'dispatch', 'too fresh', now())",
                topology.dispatch,
                topology.decider,
            )
        assert await relay.sweep_once() == 1
        # A second relay has nothing left to take; the stuck row waits, the fresh one too.
        assert await relay.sweep_once() == 0
        async with store.pool.acquire() as db:
            left = await db.fetch("SELECT body FROM outbox ORDER BY id")
        assert [bytes(row["body"]) for row in left] == [b"stuck", b"too fresh"]

        reading = await aio_pika.connect(orbit_env.settings.amqp_url)
        reader = await reading.channel()
        queue = await reader.get_queue(topology.dispatch)

        async def body() -> bytes | None:
            message = await queue.get(fail=False, no_ack=True)
            return None if message is None else message.body

        assert await eventually(body, what="the relayed message") == b"left behind"
        await reading.close()
    finally:
        await connection.close()
        await store.close()
