"""Postgres out of disk: 503s while it lasts, nothing parked, everything done after.

A chaos run filled a private cluster's disk for 20 s (issue 32, item 1). Postgres
stayed up and refused every statement that needed room with ``No space left on
device`` (SQLSTATE 53100), which Orbit took for a bug: 1,541 starts were answered
500, and decider inputs were requeued at once, spent their delivery budgets in
milliseconds and were parked, leaving executions ``running`` for good.

Here the ``orbit`` database lives in a tablespace on a small tmpfs of the test's own
(:func:`.postgres.small_disk`; the WAL is elsewhere, as it would be on a separate
volume). While executions run, the disk is filled; a client keeps starting more, and
every answer is 201 or 503 ``UNAVAILABLE`` with ``Retry-After``, never 500. Then the
disk is freed: with nothing restarted, every start answered 201 completes, the ones
refused are sent again and complete, and no message was parked.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import os
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from orbit_model.events import MessageLost
from orbit_model.views import view_json
from orbit_services.gateway.errors import RETRY_AFTER_SECONDS
from orbit_services.store import EventStore
from tests.e2e.stack import running_stack
from tests.integration.conftest import OrbitEnv

from .postgres import PrivatePostgres, private_directory, small_disk
from .workflows import ONE_STEP_YAML, echo

DISK_MEGABYTES = 48
STARTS_WHILE_FULL = 60
RECOVERY_TIMEOUT = 180.0


@pytest.fixture
def postgres_on_a_small_disk() -> Iterator[tuple[PrivatePostgres, Path]]:
    if os.geteuid() != 0:
        # CI runs as root, and runs this; a developer's machine may not let us mount.
        pytest.skip("mounting a small tmpfs for the disk needs root (CI runs as root)")
    with private_directory() as directory, small_disk(directory / "small", DISK_MEGABYTES) as disk:
        server = PrivatePostgres(directory)
        try:
            server.start()
            yield server, disk
        finally:
            server.stop()


def _fill(disk: Path) -> Path:
    """Write a file on ``disk`` until no byte more fits."""
    filler = disk / "filler"
    chunk = b"\0" * (1024 * 1024)
    with filler.open("wb", buffering=0) as out:
        with contextlib.suppress(OSError):
            while True:
                out.write(chunk)
        small = b"\0" * 4096
        try:
            while True:
                out.write(small)
        except OSError as error:
            if error.errno != errno.ENOSPC:
                raise
    return filler


@pytest.mark.timeout(600)  # generous: only a failing run comes near it
async def test_a_full_disk_answers_503_and_loses_nothing(
    orbit_env: OrbitEnv, postgres_on_a_small_disk: tuple[PrivatePostgres, Path]
) -> None:
    postgres, disk = postgres_on_a_small_disk
    url = await postgres.create_orbit_database_on_a_small_disk(disk)
    settings = orbit_env.settings_with(database_url=url)
    async with running_stack(settings, [echo]) as stack:
        headers = {"authorization": f"Bearer {stack.token}"} if stack.token else {}
        async with httpx.AsyncClient(
            base_url=stack.client.url, headers=headers, timeout=60
        ) as http:
            await stack.client.deploy(ONE_STEP_YAML)
            await stack.client.start("one-step", {"n": -1}, execution_id="before", wait=True)
            filler = await asyncio.to_thread(_fill, disk)
            answers: dict[str, httpx.Response] = {}
            for n in range(STARTS_WHILE_FULL):
                body = {"workflow": "one-step", "input": {"n": n}, "execution_id": f"full-{n}"}
                answers[f"full-{n}"] = await http.post("/v1/executions", json=body)
            filler.unlink()  # the disk is freed
        statuses = sorted({answer.status_code for answer in answers.values()})
        print(f"{STARTS_WHILE_FULL} starts while the disk was full: statuses {statuses}")
        refused = [i for i, answer in answers.items() if answer.status_code == 503]
        assert refused, "the disk never filled"
        for execution_id, answer in answers.items():
            assert answer.status_code in (201, 503), (execution_id, answer.text)
            if answer.status_code == 503:
                assert answer.json()["error"]["code"] == "UNAVAILABLE"
                assert answer.headers["Retry-After"] == str(RETRY_AFTER_SECONDS)
        for execution_id in refused:
            n = int(execution_id.split("-")[1])
            await stack.client.start("one-step", {"n": n}, execution_id=execution_id)
        for execution_id in answers:
            n = int(execution_id.split("-")[1])
            done = view_json(await stack.client.wait(execution_id, timeout=RECOVERY_TIMEOUT))
            assert (done["status"], done["output"]) == ("completed", {"n": n}), execution_id
    store = await EventStore.connect(url, min_size=1, max_size=1)
    try:
        for execution_id in ("before", *answers):
            events = [s.event for s in await store.read_events(execution_id)]
            assert not [e for e in events if isinstance(e, MessageLost)], execution_id
    finally:
        await store.close()
