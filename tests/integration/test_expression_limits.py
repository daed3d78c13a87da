"""Bounded expressions at the gateway: a query answers within its limits or is refused.

Against a real Postgres and RabbitMQ, this module proves that a query's value larger
than ``ORBIT_MAX_PAYLOAD_BYTES`` is refused 422 ``EXPRESSION_LIMIT`` rather than sent,
and that queries spending their whole budget, a reader may send as often as it likes,
leave the gateway answering others (before: ``size(lists.range(15000).map(x, x))``
held it 8 s).
"""

from __future__ import annotations

import asyncio
import time

from orbit_model.errors import ErrorCode

from .conftest import OrbitEnv
from .test_gateway import YAML, error_of, running

BIG_QUERIES = """
orbit: 1
workflow: big-queries
version: 1.0.0
input: {type: object}
queries:
  text: ${ input.text }
  doubled: ${ [input.text, input.text] }
tasks:
  wait: {version: "1"}
steps:
  - id: wait
    task: wait
"""


async def test_a_query_value_over_the_payload_limit_is_refused(orbit_env: OrbitEnv) -> None:
    async with running(orbit_env, orbit_env.settings_with(max_payload_bytes=4096)) as gateway:
        response = await gateway.client.post("/v1/definitions", content=BIG_QUERIES, headers=YAML)
        assert response.status_code == 201, response.text
        execution_id = await gateway.start("big-queries", input={"text": "x" * 3000})
        queries = f"/v1/executions/{execution_id}/queries"
        answered = await gateway.client.get(f"{queries}/text")
        assert answered.json() == {"value": "x" * 3000}
        status, code, message = error_of(await gateway.client.get(f"{queries}/doubled"))
        assert (status, code) == (422, ErrorCode.EXPRESSION_LIMIT)
        assert "is 6007 bytes; the limit is 4096 (ORBIT_MAX_PAYLOAD_BYTES)" in message


TENFOLD = '.replace("a", "aaaaaaaaaa")'
"""Each makes the string ten times longer: eight make 100 MB of one ``a``."""
COSTLY_QUERIES = """
orbit: 1
workflow: costly-queries
version: 1.0.0
input: {type: object}
queries:
  mapped: ${ size(lists.range(15000).map(x, x)) }
  nested: ${ lists.range(3000).all(a, lists.range(3000).all(b, a != b || true)) }
  blown: ${ input.sREPLACED }
tasks:
  wait: {version: "1"}
steps:
  - id: wait
    task: wait
""".replace("REPLACED", TENFOLD * 8)


async def test_costly_queries_are_bounded_and_others_are_answered_meanwhile(
    orbit_env: OrbitEnv,
) -> None:
    async with running(orbit_env, orbit_env.settings) as gateway:
        client = gateway.client
        response = await client.post("/v1/definitions", content=COSTLY_QUERIES, headers=YAML)
        assert response.status_code == 201, response.text
        execution_id = await gateway.start("costly-queries", input={"s": "a"})
        queries = f"/v1/executions/{execution_id}/queries"
        assert (await client.get(f"{queries}/mapped")).json() == {"value": 15_000}
        attacks = [
            asyncio.create_task(client.get(f"{queries}/{name}")) for name in ("nested", "blown") * 4
        ]
        await asyncio.sleep(0)  # every attack is under way
        started = time.monotonic()
        view = await client.get(f"/v1/executions/{execution_id}")
        waited = time.monotonic() - started
        assert view.status_code == 200
        for answer in await asyncio.gather(*attacks):
            assert error_of(answer)[:2] == (422, ErrorCode.EXPRESSION_LIMIT)
        assert waited < 1.0, f"another client waited {waited:.1f} s"
