"""The SDK on its own: installed into a fresh environment with only the pure core beside it.

A worker-only user installs ``orbit-sdk`` (and ``orbit-model``): none of the
server's dependencies come with it, and a worker run from that environment
serves a workflow run by the services of this test.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from orbit_model.views import view_json
from tests.integration.conftest import OrbitEnv

from .stack import running_stack

ROOT = Path(__file__).parents[2]
SERVER_ONLY = {
    "asyncpg",
    "fastapi",
    "uvicorn",
    "aiohttp",
    "prometheus-client",
    "faststream",
    "starlette",
    "orbit-server",
}
# The otel extra's. (typer and rich, the cli extra's, come anyway: the CEL library
# the model depends on ships a command line of its own.)
EXTRAS_ONLY = {"opentelemetry-sdk", "opentelemetry-exporter-otlp-proto-http"}

WORKFLOW = """
orbit: 1
workflow: sdk-alone
version: 1.0.0
tasks:
  shout: {version: "1"}
steps:
  - id: shout
    task: shout
    input: {word: "${ input.word }"}
"""

WORKER = textwrap.dedent(
    """
    from orbit_sdk import TaskContext, Worker, task

    @task("shout", version="1")
    async def shout(inp: dict, ctx: TaskContext) -> dict:
        return {"shouted": inp["word"].upper(), "key": ctx.idempotency_key}

    Worker([shout], worker_id="sdk-alone").run_forever()
    """
)


def _uv() -> str:
    found = shutil.which("uv", path=str(Path(sys.executable).parent)) or shutil.which("uv")
    if found is None:  # pragma: no cover - make install puts it in the venv
        pytest.fail("uv is not installed (make install installs it)")
    return found


@pytest.fixture(scope="module")
def sdk_venv(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A new virtual environment holding orbit-model and orbit-sdk, as pinned by the lock."""
    venv = tmp_path_factory.mktemp("sdk") / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    python = venv / "bin" / "python"
    subprocess.run(
        [
            _uv(),
            "pip",
            "install",
            "--quiet",
            "--python",
            str(python),
            # As a user's `pip install` would: the workspace's own sources are not used.
            "--no-sources",
            "-c",
            str(ROOT / "requirements.lock"),
            str(ROOT / "libs/orbit_model"),
            str(ROOT / "libs/orbit_sdk"),
        ],
        check=True,
        timeout=240,
    )
    return venv


def _installed(venv: Path) -> set[str]:
    listed = subprocess.run(
        [_uv(), "pip", "list", "--format", "json", "--python", str(venv / "bin" / "python")],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return {entry["name"].lower() for entry in json.loads(listed)}


@pytest.mark.timeout(300)
def test_the_sdk_installs_without_any_server_dependency(sdk_venv: Path) -> None:
    installed = _installed(sdk_venv)
    assert {"orbit-model", "orbit-sdk", "aio-pika", "httpx"} <= installed
    assert not installed & SERVER_ONLY, installed & SERVER_ONLY
    assert not installed & EXTRAS_ONLY, installed & EXTRAS_ONLY


@pytest.mark.timeout(300)
async def test_a_worker_from_the_sdk_alone_serves_a_workflow(
    sdk_venv: Path, orbit_env: OrbitEnv, tmp_path: Path
) -> None:
    script = tmp_path / "shout_worker.py"
    script.write_text(WORKER, encoding="utf-8")
    settings = orbit_env.settings
    async with running_stack(settings) as stack:
        environment = {
            **os.environ,
            "ORBIT_AMQP_URL": stack.as_user("worker").amqp_url,
            "ORBIT_NAMESPACE": settings.namespace,
            "ORBIT_DECIDER_PARTITIONS": str(settings.decider_partitions),
        }
        await stack.client.deploy(WORKFLOW)
        worker = await asyncio.create_subprocess_exec(
            str(sdk_venv / "bin" / "python"), str(script), env=environment
        )
        try:
            started = await stack.client.start("sdk-alone", {"word": "hello"}, execution_id="s-1")
            assert started["created"]
            done = view_json(await stack.client.wait("s-1", timeout=30))
        finally:
            worker.terminate()
            assert await asyncio.wait_for(worker.wait(), 30) == 0  # SIGTERM stops it cleanly
    assert done["status"] == "completed", done
    assert done["output"] == {"shouted": "HELLO", "key": "s-1:shout"}
