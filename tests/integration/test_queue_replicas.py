"""Queues are made with ORBIT_QUEUE_REPLICAS replicas, and queues that exist keep theirs.

RabbitMQ refuses to declare a queue again with other arguments, and a queue
an older Orbit made has no ``x-quorum-initial-group-size``: the services must
start on such an installation, use those queues as they are, and keep their
channel (a refused declaration closes the channel it was made on). The
broker is the local single node: it makes one replica whatever the count.
"""

from __future__ import annotations

import subprocess

from orbit_model.topology import REPLICAS_ARGUMENT, Topology
from orbit_sdk.amqp import Publisher, connect, open_channel
from orbit_services.runtime.broker import declare_topology

from .conftest import OrbitEnv


def _arguments(prefix: str) -> dict[str, str]:
    """Each queue of the namespace with its arguments, as rabbitmqctl lists them."""
    listed = subprocess.run(
        ["rabbitmqctl", "list_queues", "-q", "--no-table-headers", "name", "arguments"],
        check=True,
        capture_output=True,
        text=True,
        timeout=60,
    )
    rows = (line.split("\t", 1) for line in listed.stdout.splitlines())
    return {row[0]: row[1] for row in rows if row[0].startswith(prefix) and len(row) == 2}


async def test_new_queues_get_the_replicas_and_old_ones_are_used_as_they_are(
    orbit_env: OrbitEnv,
) -> None:
    topology = Topology(orbit_env.topology.namespace, 2, replicas=3)
    connection = await connect(orbit_env.settings.amqp_url)
    try:
        channel = await open_channel(connection)
        # As an older Orbit made them: the commands queue without a replica count, the
        # control queue with another one.
        old = {**topology.queue_arguments()}
        del old[REPLICAS_ARGUMENT]
        await channel.declare_queue(topology.commands, durable=True, arguments=old)
        await channel.declare_queue(
            topology.control, durable=True, arguments={**old, REPLICAS_ARGUMENT: 5}
        )

        await declare_topology(channel, topology)
        # The channel survived the refusals: it still publishes, confirmed.
        await Publisher(channel).publish(topology.commands, "command", b"{}")
        await Publisher(channel).publish(topology.control, "control", b"{}")
    finally:
        await connection.close()

    found = _arguments(f"{topology.namespace}.")
    made = f'{{"{REPLICAS_ARGUMENT}",3}}'
    for name in (
        topology.decider_queue(0),
        topology.decider_queue(1),
        topology.dead_letter,
        topology.dead_letter_reports,
    ):
        assert made in found[name], (name, found[name])
    assert REPLICAS_ARGUMENT not in found[topology.commands]
    assert f'{{"{REPLICAS_ARGUMENT}",5}}' in found[topology.control]
