"""The README's five-minute tour, run as written against a running Orbit.

The workflow and the worker are taken from the README's code blocks into a
fresh directory, and its shell block is run there by bash, with `.venv/bin`
on the PATH and this test's Orbit in the `ORBIT_*` environment.
"""

from __future__ import annotations

import asyncio
import os
import re
import signal
import sys
from pathlib import Path

from orbit_model.views import view_json
from tests.integration.conftest import OrbitEnv

from .stack import running_stack

ROOT = Path(__file__).parents[2]


def _tour() -> tuple[str, str, str]:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    section = readme.split("## A five-minute tour", 1)[1].split("\n## ", 1)[0]
    blocks = dict(re.findall(r"```(yaml|python|sh)\n(.*?)```", section, re.S))
    return blocks["yaml"], blocks["python"], blocks["sh"]


async def test_the_tour_runs_as_written(orbit_env: OrbitEnv, tmp_path: Path) -> None:
    workflow, worker, commands = _tour()
    (tmp_path / "approve.yaml").write_text(workflow)
    (tmp_path / "expenses.py").write_text(worker)
    # Auth on, as `make demo` runs it: the token `orbit dev` saved is what the CLI uses.
    async with running_stack(orbit_env.settings_with(auth="tokens")) as stack:
        settings = stack.settings
        # No ORBIT_AMQP_URL, as the reader has none: the worker logs in as the worker
        # user `orbit dev` saved (the stack saves one the same way).
        env = {
            **{name: value for name, value in os.environ.items() if name != "ORBIT_AMQP_URL"},
            "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}",
            "ORBIT_URL": f"http://127.0.0.1:{settings.http_port}",
            "ORBIT_NAMESPACE": settings.namespace,
            "ORBIT_DECIDER_PARTITIONS": str(settings.decider_partitions),
        }
        # `set -e`: a failing command fails the tour; the background worker is
        # stopped with its process group at the end.
        # Output to a file: the background worker keeps it open after bash ends.
        log = tmp_path / "tour.log"
        with log.open("wb") as sink:
            shell = await asyncio.create_subprocess_exec(
                "bash",
                "-c",
                "set -e\n" + commands,
                cwd=tmp_path,
                env=env,
                stdout=sink,
                stderr=asyncio.subprocess.STDOUT,
                start_new_session=True,
            )
        try:
            status = await asyncio.wait_for(shell.wait(), timeout=90)
            output = log.read_text()
            assert status == 0, output
            execution = view_json(await stack.client.wait("exp-1", timeout=30))
        finally:
            os.killpg(shell.pid, signal.SIGTERM)
    assert "registered approve-expense@1.0.0" in output
    assert "Traceback" not in output
    assert execution["status"] == "completed"
    assert execution["output"] == {"paid": {"key": "exp-1:pay", "paid": 42}}
