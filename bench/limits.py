"""What the machine allows, measured in the same run: commits/s and confirmed publishes/s."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import aio_pika
import asyncpg

DURATION = 3.0


async def commits_per_second(database_url: str, connections: int = 1) -> dict[str, Any]:
    """Single-row INSERT, each its own committed transaction, on ``connections`` connections."""
    setup = await asyncpg.connect(database_url)
    await setup.execute("CREATE TABLE IF NOT EXISTS bench_commits (id bigserial, v int)")
    await setup.close()
    pool = [await asyncpg.connect(database_url) for _ in range(connections)]
    deadline = time.perf_counter() + DURATION
    counts = [0] * connections

    async def loop(index: int, conn: asyncpg.Connection) -> None:
        statement = await conn.prepare("INSERT INTO bench_commits (v) VALUES ($1)")
        while time.perf_counter() < deadline:
            await statement.fetch(index)  # autocommit: one transaction per row
            counts[index] += 1

    started = time.perf_counter()
    await asyncio.gather(*(loop(i, c) for i, c in enumerate(pool)))
    elapsed = time.perf_counter() - started
    for conn in pool:
        await conn.close()
    return {
        "connections": connections,
        "commits": sum(counts),
        "seconds": round(elapsed, 2),
        "per_second": round(sum(counts) / elapsed, 1),
    }


async def confirmed_publishes_per_second(
    amqp_url: str, queue_name: str, in_flight: int = 256
) -> dict[str, Any]:
    """Persistent messages (200 bytes) to a durable quorum queue, confirms awaited, ``in_flight``
    outstanding at a time, as the engine's queues are declared."""
    connection = await aio_pika.connect(amqp_url)
    try:
        channel = await connection.channel(publisher_confirms=True)
        queue = await channel.declare_queue(
            queue_name, durable=True, arguments={"x-queue-type": "quorum"}
        )
        body = b"x" * 200
        deadline = time.perf_counter() + DURATION
        sent = 0

        async def one() -> None:
            nonlocal sent
            while time.perf_counter() < deadline:
                await channel.default_exchange.publish(
                    aio_pika.Message(body, delivery_mode=aio_pika.DeliveryMode.PERSISTENT),
                    routing_key=queue_name,
                )
                sent += 1

        started = time.perf_counter()
        await asyncio.gather(*(one() for _ in range(in_flight)))
        elapsed = time.perf_counter() - started
        await queue.delete(if_unused=False, if_empty=False)
        return {
            "queue": "quorum, durable",
            "in_flight": in_flight,
            "messages": sent,
            "seconds": round(elapsed, 2),
            "per_second": round(sent / elapsed, 1),
        }
    finally:
        await connection.close()
