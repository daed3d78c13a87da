"""A definition past the compiler's limits cannot stall or exhaust the gateway.

Against a real Postgres and RabbitMQ, the probe's oversized definitions (issue 31,
items 2 and 3) are sent together: 20,000 ``sleep`` steps (536 KB, which stalled the
gateway 25 s before a ``MemoryError`` and a 500), the same as compiled IR, and a 200 KB
string aliased 1,000 times (205 KB, a 227 MB IR). Each is refused with
``INVALID_DEFINITION`` naming its limit, compiled off the event loop, one at a time,
while another client is answered.
"""

from __future__ import annotations

import asyncio
import json
import time

from orbit_model import compile_definition
from orbit_model.limits import MAX_STEPS

from .conftest import OrbitEnv
from .test_gateway import JSON, YAML, error_of, running

PROBE_BOUND = 5.0
"""The longest the other client may wait, in seconds: it waited 25 s, and is answered in
milliseconds now; the margin is for a machine busy with other work."""


def many_steps(count: int) -> str:
    steps = "".join(f"  - {{id: s{i}, sleep: 1s}}\n" for i in range(count))
    return f"orbit: 1\nworkflow: many\nversion: 1.0.0\nsteps:\n{steps}"


def aliased(string_bytes: int) -> str:
    lines = ["orbit: 1", "workflow: aliased", "version: 1.0.0"]
    lines += [f"description: &l0 '{'x' * string_bytes}'", "input:"]
    for level in range(1, 4):
        lines.append(f"  l{level}: &l{level} [{', '.join([f'*l{level - 1}'] * 10)}]")
    lines += ["steps:", "  - {id: a, sleep: 1s}"]
    return "\n".join(lines) + "\n"


def many_steps_as_ir(count: int) -> bytes:
    ir = compile_definition(many_steps(1)).ir.to_json_data()
    ir["steps"] = [
        {"kind": "sleep", "id": f"s{i}", "after": [f"s{i - 1}"] if i else [], "duration_ms": 1}
        for i in range(count)
    ]
    return json.dumps(ir, separators=(",", ":")).encode()


async def test_oversized_definitions_are_refused_while_another_client_is_answered(
    orbit_env: OrbitEnv,
) -> None:
    bodies = [
        (many_steps(20_000), YAML),
        (aliased(200_000), YAML),
        (many_steps_as_ir(10_000), JSON),
    ] * 2
    assert all(len(body) < orbit_env.settings.max_definition_bytes for body, _ in bodies)
    async with running(orbit_env, orbit_env.settings) as gateway:
        client = gateway.client
        attacks = [
            asyncio.create_task(client.post("/v1/definitions", content=body, headers=headers))
            for body, headers in bodies
        ]
        waits = []
        while not all(attack.done() for attack in attacks):  # probe while the attack runs
            started = time.monotonic()
            probe = await client.get("/v1/definitions")
            waits.append(time.monotonic() - started)
            assert probe.status_code == 200
            assert probe.json() == []
            await asyncio.sleep(0.05)
        answers = [error_of(answer) for answer in await asyncio.gather(*attacks)]
        print(f"{len(waits)} probes while under attack, the longest waited {max(waits):.3f} s")
        assert waits  # the attacks took long enough to be probed
        assert max(waits) < PROBE_BOUND, f"the other client waited {max(waits):.1f} s"
        limits = [
            f"steps[{MAX_STEPS}]: the definition has 20,000 steps (finally included);"
            f" the limit is {MAX_STEPS:,}",
            "the document expands to more than 4,194,304 characters of keys and values",
            f"steps[{MAX_STEPS}]: the definition has 10,000 steps (finally included);"
            f" the limit is {MAX_STEPS:,}",
        ] * 2
        for (status, code, message), limit in zip(answers, limits, strict=True):
            assert (status, code) == (400, "INVALID_DEFINITION")
            assert limit in message
        assert (await client.get("/v1/definitions")).json() == []
