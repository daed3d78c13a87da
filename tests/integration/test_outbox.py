"""The outbox: published rows deleted in bulk with the next append; the sweep relays rows
left behind, and a stuck row holds none up."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from pathlib import Path

import aio_pika
import pytest

from orbit_model import compile_definition
from orbit_model.inputs import start_execution
from orbit_model.state import replay
from orbit_sdk.amqp import Publisher, open_channel
from orbit_sdk.amqp import connect as connect_broker
from orbit_services.runtime.broker import declare_topology
from orbit_services.store import Append, AppendConflict, EventStore, OutboxMessage
from orbit_services.store.outbox import OutboxRelay
from tests.database import Database

from .conftest import OrbitEnv
from .eventually import eventually

HELLO = compile_definition((Path(__file__).parents[2] / "examples/hello-world.yaml").read_text())


@contextlib.asynccontextmanager
async def _relay(orbit_env: OrbitEnv) -> AsyncIterator[tuple[EventStore, OutboxRelay]]:
    """A store and a relay over a declared topology, closed on the way out."""
    store = await EventStore.connect(orbit_env.settings.database_url)
    connection = await connect_broker(orbit_env.settings.amqp_url)
    try:
        channel = await open_channel(connection)
        await declare_topology(channel, orbit_env.topology)
        yield store, OutboxRelay(store.outbox, Publisher(channel), grace_seconds=5)
    finally:
        await connection.close()
        await store.close()


async def test_the_sweep_publishes_rows_left_behind(orbit_env: OrbitEnv) -> None:
    topology = orbit_env.topology
    async with _relay(orbit_env) as (_, relay):
        async with Database(orbit_env.settings.database_url).connection() as db:
            await db.execute(
                "INSERT INTO outbox (exchange, routing_key, body, headers, created_at) VALUES"
                " ($1, 'command', 'left behind', '{\"traceparent\": \"00-ab-cd-01\"}',"
                "  now() - interval '1 minute'),"
                # A partition that does not exist (the partition count was changed):
                # unroutable, so returned by the broker.
                " ($2, '99', 'stuck', NULL, now() - interval '1 minute'),"
                " ($1, 'command', 'too fresh', NULL, now())",
                topology.commands,
                topology.decider,
            )
        assert await relay.sweep_once() == 1
        # A second relay has nothing left to take; the stuck row waits, the fresh one too.
        assert await relay.sweep_once() == 0
        left = await Database(orbit_env.settings.database_url).fetch(
            "SELECT body FROM outbox ORDER BY id"
        )
        assert [bytes(row["body"]) for row in left] == [b"stuck", b"too fresh"]

        reading = await aio_pika.connect(orbit_env.settings.amqp_url)
        reader = await reading.channel()
        queue = await reader.get_queue(topology.commands)

        async def relayed() -> aio_pika.abc.AbstractIncomingMessage | None:
            return await queue.get(fail=False, no_ack=True)

        message = await eventually(relayed, what="the relayed message")
        assert message is not None
        assert message.body == b"left behind"
        assert message.headers["traceparent"] == "00-ab-cd-01"  # its headers went along
        await reading.close()


async def test_published_rows_go_with_the_next_append_not_a_transaction_of_their_own(
    orbit_env: OrbitEnv,
) -> None:
    topology = orbit_env.topology
    async with _relay(orbit_env) as (store, relay):
        message = OutboxMessage(topology.commands, "command", b"a command")
        first = start_execution(HELLO.ir, HELLO.hash, "o-1", {})
        await store.register_definition(HELLO)
        ids = await store.append([Append("o-1", 0, [first], replay([first]), outbox=[message])])
        await relay.publish_committed(ids, [message])

        async def rows() -> list[int]:
            database = Database(orbit_env.settings.database_url)
            return [r["id"] for r in await database.fetch("SELECT id FROM outbox")]

        assert await rows() == ids  # published, not deleted yet
        second = start_execution(HELLO.ir, HELLO.hash, "o-2", {})
        await store.append([Append("o-2", 0, [second], replay([second]))])
        assert await rows() == []  # deleted in that append's transaction
        # A failed append keeps them for the next one.
        ids = await store.append([Append("o-3", 0, [], replay([]), outbox=[message])])
        await relay.publish_committed(ids, [message])
        with pytest.raises(AppendConflict):
            await store.append([Append("o-2", 0, [second], replay([second]))])  # taken
        assert await rows() == ids
        assert await store.outbox.flush_published() == 1
        assert await rows() == []
