"""A publish RabbitMQ refuses (nacks) is told apart from one it cannot route, and the
publisher replaces its channel after a refusal.

A channel keeps per quorum queue the state of its publishing, and after a
queue's leader node went away RabbitMQ could leave that state refusing every
publish for the rest of the channel's life (the cluster test saw it once).
Here the refusal comes from a queue that is full with ``reject-publish``
overflow, on the local node: the channel is renewed once, and once the queue
has room the publisher publishes again on its new channel.
"""

from __future__ import annotations

import pytest

from orbit_model.errors import ErrorCode, OrbitError
from orbit_sdk.amqp import Publisher, connect, open_channel
from orbit_services.runtime.broker import declare_topology
from tests.integration.eventually import eventually

from .conftest import OrbitEnv


async def test_a_refused_publish_renews_the_channel_and_an_unroutable_one_does_not(
    orbit_env: OrbitEnv,
) -> None:
    topology = orbit_env.topology
    full = f"{topology.namespace}.refusing"
    connection = await connect(orbit_env.settings.amqp_url)
    try:
        channel = await open_channel(connection)
        await declare_topology(channel, topology)
        queue = await channel.declare_queue(
            full,
            durable=True,
            arguments={"x-queue-type": "quorum", "x-max-length": 1, "x-overflow": "reject-publish"},
        )
        await queue.bind(topology.tasks, "refusing")
        publisher = Publisher(channel)

        with pytest.raises(OrbitError, match="nothing is bound") as unroutable:
            await publisher.publish(topology.tasks, "unbound", b"{}")
        assert unroutable.value.code is ErrorCode.UNAVAILABLE
        assert publisher.renewals == 0

        first = await channel.get_underlay_channel()
        # A quorum queue learns it is over its length after the fact: it takes a few.
        with pytest.raises(OrbitError, match="refused") as refused:
            await _publish_until_refused(publisher, topology.tasks)
        assert refused.value.code is ErrorCode.UNAVAILABLE
        assert publisher.renewals == 1

        async def renewed() -> bool:
            underlay = await channel.get_underlay_channel()
            return underlay is not first and not underlay.is_closed

        await eventually(renewed, timeout=30, what="a new channel after the refusal")
        await queue.purge()
        await publisher.publish(topology.tasks, "refusing", b"{}")  # confirmed, on the new one
        assert await channel.get_underlay_channel() is not first
        assert publisher.renewals == 1
    finally:
        cleanup = await connection.channel()
        await cleanup.queue_delete(full)
        await connection.close()


async def _publish_until_refused(publisher: Publisher, exchange: str) -> None:
    for _ in range(100):
        await publisher.publish(exchange, "refusing", b"{}")
