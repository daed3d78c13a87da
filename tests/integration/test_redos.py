"""A schema's pattern cannot freeze the gateway (ReDoS).

Against a real Postgres and RabbitMQ, this module proves that starts and signals whose
values would make a backtracking engine try every way to match ``^(a+)+$`` are refused
at once, and that another client is answered while they arrive. Before contracts
matched with linear engines, 27 characters kept the gateway's event loop for about 5 s
per check.
"""

from __future__ import annotations

import asyncio
import time

from .conftest import OrbitEnv
from .test_gateway import YAML, error_of, running

PATTERNED = """
orbit: 1
workflow: patterned
version: 1.0.0
input:
  type: object
  properties:
    code: {type: string, pattern: "^(a+)+$", default: a}
signals:
  code:
    type: object
    properties:
      code: {type: string, pattern: "^(a+)+$"}
tasks:
  wait: {version: "1"}
steps:
  - id: wait
    task: wait
"""
EVIL = "a" * 27 + "!"


async def test_catastrophic_patterns_are_refused_while_others_are_answered(
    orbit_env: OrbitEnv,
) -> None:
    async with running(orbit_env, orbit_env.settings) as gateway:
        client = gateway.client
        response = await client.post("/v1/definitions", content=PATTERNED, headers=YAML)
        assert response.status_code == 201, response.text
        execution_id = await gateway.start("patterned", input={"code": "aaa"})
        signal = f"/v1/executions/{execution_id}/signals/code"
        attacks = [
            asyncio.create_task(client.post(signal, json={"code": EVIL})) for _ in range(3)
        ] + [
            asyncio.create_task(
                client.post(
                    "/v1/executions", json={"workflow": "patterned", "input": {"code": EVIL}}
                )
            )
            for _ in range(3)
        ]
        await asyncio.sleep(0)  # every attack is under way
        started = time.monotonic()
        view = await client.get(f"/v1/executions/{execution_id}")
        waited = time.monotonic() - started
        assert view.status_code == 200
        answers = [error_of(answer)[:2] for answer in await asyncio.gather(*attacks)]
        assert answers == [(422, "SIGNAL_PAYLOAD_INVALID")] * 3 + [(400, "INVALID_INPUT")] * 3
        assert waited < 1.0, f"another client waited {waited:.1f} s"
