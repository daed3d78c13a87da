"""The README's "Running the services yourself", run as written: its commands in order.

Each line of its shell block runs from the repository with this test's
database, namespace, decider partitions and a free port in the ``ORBIT_*``
environment the README names (no ``ORBIT_AMQP_URL``: the reader has none), and
a credentials file of the test's own. A ``service`` or ``worker`` line is
started as the README says, in the background, and the next line runs once it
logged that it started; every other line must exit 0. The namespace's broker
users, queues and database go with the test's installation.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import signal
from pathlib import Path

from tests.integration.conftest import OrbitEnv
from tests.integration.eventually import eventually

from .stack import free_port

ROOT = Path(__file__).parents[2]
LONG_RUNNING = re.compile(r"^\.venv/bin/orbit (service|worker) ")
STARTED = "action=service.started"
"""The line every ``orbit service`` and ``orbit worker`` logs once it runs."""


def _commands() -> list[str]:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    section = readme.split("## Running the services yourself", 1)[1].split("\n## ", 1)[0]
    block = re.search(r"```sh\n(.*?)```", section, re.S)
    assert block is not None, "the section has a sh block"
    lines = (re.sub(r"\s+#\s.*$", "", line).strip() for line in block[1].splitlines())
    return [line for line in lines if line]


def test_the_section_sets_up_the_brokers_users_before_the_services() -> None:
    commands = _commands()
    setup = commands.index(".venv/bin/orbit broker setup --save")
    first_service = next(n for n, c in enumerate(commands) if LONG_RUNNING.match(c))
    assert setup < first_service
    assert any(c.startswith(".venv/bin/orbit broker user add --role worker") for c in commands)


async def _started(process: asyncio.subprocess.Process, log: Path, command: str) -> None:
    async def look() -> str:
        if process.returncode is not None:
            raise AssertionError(f"{command} ended:\n{log.read_text()}")
        return log.read_text()

    await eventually(look, lambda text: STARTED in text, timeout=60, what=f"{command} started")


async def test_the_services_run_as_written(orbit_env: OrbitEnv, tmp_path: Path) -> None:
    settings = orbit_env.settings
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith("ORBIT_")},
        "ORBIT_DATABASE_URL": settings.database_url,
        "ORBIT_NAMESPACE": settings.namespace,
        "ORBIT_DECIDER_PARTITIONS": str(settings.decider_partitions),
        "ORBIT_HTTP_PORT": str(free_port()),
        "ORBIT_CREDENTIALS": str(tmp_path / "credentials.json"),
    }
    running: list[asyncio.subprocess.Process] = []
    output = ""
    try:
        for number, command in enumerate(_commands()):
            if LONG_RUNNING.match(command):
                log = tmp_path / f"{number}.log"
                with log.open("wb") as sink:
                    process = await asyncio.create_subprocess_exec(
                        "bash", "-c", command, cwd=ROOT, env=env, stdout=sink,
                        stderr=asyncio.subprocess.STDOUT, start_new_session=True,
                    )  # fmt: skip
                running.append(process)
                await _started(process, log, command)
                continue
            shell = await asyncio.create_subprocess_exec(
                "bash", "-c", "set -o pipefail\n" + command, cwd=ROOT, env=env,
                stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
            )  # fmt: skip
            out, _ = await asyncio.wait_for(shell.communicate(), timeout=120)
            output = out.decode()
            assert shell.returncode == 0, f"{command}\n{output}"
            assert "Traceback" not in output, output
    finally:
        for process in running:
            with contextlib.suppress(ProcessLookupError):  # one that ended on its own
                os.killpg(process.pid, signal.SIGTERM)
        for process in running:
            await asyncio.wait_for(process.wait(), timeout=30)
    # The last command started hello-world and followed it to its end.
    assert re.search(r"\S+ completed", output), output
    assert '"greeting": "Hello, Ada!"' in output, output
