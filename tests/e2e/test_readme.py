"""The README's quick start, run as written: ``make demo`` ends with a completed execution.

(``make test`` is what CI itself runs.) The demo gets this test's database,
namespace and a free port through the ``ORBIT_*`` environment, so it runs
beside the other tests; it is stopped with Ctrl-C (SIGINT), as a reader would.
"""

from __future__ import annotations

import asyncio
import os
import re
import signal
from pathlib import Path

from tests.integration.conftest import OrbitEnv

from .stack import free_port

ROOT = Path(__file__).parents[2]


def _quick_start_commands() -> list[str]:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    section = readme.split("## Quick start", 1)[1].split("\n## ", 1)[0]
    block = re.search(r"```sh\n(.*?)```", section, re.S)
    assert block is not None, "the quick start has a sh block"
    return [line.split("#", 1)[0].strip() for line in block[1].splitlines() if line.strip()]


def test_the_quick_start_is_two_commands() -> None:
    assert _quick_start_commands() == ["make demo", "make test"]


async def test_make_demo_runs_an_order_to_completion(orbit_env: OrbitEnv) -> None:
    settings = orbit_env.settings
    env = {
        **os.environ,
        "ORBIT_DATABASE_URL": settings.database_url,
        "ORBIT_AMQP_URL": settings.amqp_url,
        "ORBIT_NAMESPACE": settings.namespace,
        "ORBIT_DECIDER_PARTITIONS": str(settings.decider_partitions),
        "ORBIT_HTTP_PORT": str(free_port()),
    }
    command = _quick_start_commands()[0].split()
    demo = await asyncio.create_subprocess_exec(
        *command,
        cwd=ROOT,
        env=env,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
        start_new_session=True,  # Ctrl-C goes to the whole group, make and orbit
    )
    assert demo.stdout is not None
    seen: list[str] = []
    try:
        async with asyncio.timeout(60):
            while True:
                line = (await demo.stdout.readline()).decode()
                assert line, "the demo ended early:\n" + "".join(seen)
                seen.append(line)
                if "serving until Ctrl-C" in line:
                    break
    finally:
        os.killpg(demo.pid, signal.SIGINT)
        rest, _ = await asyncio.wait_for(demo.communicate(), timeout=30)
    output = "".join(seen)
    assert re.search(r"started order-fulfilment as \S+", output)
    assert re.search(r"\S+ completed: output \{.*'approved': True", output), output
    assert "Traceback" not in output + rest.decode()
