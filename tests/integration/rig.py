"""A test rig for the decider: the test plays the gateway and the workers.

It appends starts directly to the store (as the gateway does), reads what the
decider sends to a task queue, and answers with results on the decider's own
queues.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass

import aio_pika
from aio_pika.abc import AbstractChannel

from orbit_model.compiler import Definition
from orbit_model.inputs import start_execution
from orbit_model.messages import DeliveryLost, TaskAssignment, TaskResult, Wake, encode
from orbit_model.state import ExecutionState, replay
from orbit_model.topology import Topology
from orbit_services.decider.service import DeciderService
from orbit_services.runtime.broker import declare_task_queue, declare_topology
from orbit_services.runtime.settings import Settings
from orbit_services.store import Append, EventStore
from tests.database import Database

from .eventually import eventually


@dataclass
class Rig:
    store: EventStore
    channel: AbstractChannel
    topology: Topology
    decider: DeciderService
    database: Database

    async def start(
        self,
        definition: Definition,
        execution_id: str,
        input: object,
        delivery_secret: str | None = None,
    ) -> None:
        event = start_execution(
            definition.ir, definition.hash, execution_id, input, delivery_secret=delivery_secret
        )
        await self.store.append([Append(execution_id, 0, [event], replay([event]))])
        await self.send(Wake(execution_id=execution_id))

    async def send(self, message: Wake | TaskResult | DeliveryLost) -> None:
        route = self.topology.decider_route(message.execution_id)
        exchange = await self.channel.get_exchange(route.exchange)
        await exchange.publish(aio_pika.Message(encode(message)), route.routing_key)

    async def decided(self, message: Wake | TaskResult | DeliveryLost) -> None:
        """Send ``message`` and return once the decider has committed a batch since: with
        nothing else in flight, the one that took it (an input that changes nothing
        leaves no event to wait for)."""
        before = self.decider.batches

        async def batches() -> int:
            return self.decider.batches

        await self.send(message)
        await eventually(batches, lambda n: n > before, timeout=30, what="a batch decided")

    async def next_dispatch(
        self, task: str = "greet", version: str = "1", timeout: float = 30.0
    ) -> TaskAssignment:
        """The next task the decider published to the queue of ``task@version``."""
        name = await declare_task_queue(self.channel, self.topology, task, version)
        queue = await self.channel.get_queue(name)

        async def probe() -> aio_pika.abc.AbstractIncomingMessage | None:
            return await queue.get(fail=False, no_ack=True)

        message = await eventually(probe, lambda m: m is not None, timeout, what="a dispatch")
        assert message is not None
        return TaskAssignment.model_validate_json(message.body)

    async def state(self, execution_id: str) -> ExecutionState:
        return replay(e.event for e in await self.store.read_events(execution_id))

    async def status(self, execution_id: str) -> str:
        row = await self.store.execution(execution_id)
        return row.status if row else "missing"


@contextlib.asynccontextmanager
async def decider_rig(settings: Settings, topology: Topology) -> AsyncIterator[Rig]:
    store = await EventStore.connect(settings.database_url)
    connection = await aio_pika.connect(settings.amqp_url)
    channel = await connection.channel()
    await declare_topology(channel, topology)
    decider = DeciderService(settings)
    await decider.start()
    try:
        yield Rig(store, channel, topology, decider, Database(settings.database_url))
    finally:
        await decider.stop()
        await connection.close()
        await store.close()
