"""A frozen Postgres: the gateway answers every request within its bound, 503 or 2xx.

A chaos run stopped a cluster with SIGSTOP for 15 s (issue 32, item 8): its
connections stayed open and nothing answered, and 26 of 97 starts waited past
the client's 10 s timeout, since nothing on the request path bounded a statement.
Here a private cluster (:mod:`.postgres`) is frozen the same way, longer than any
bound, while a client starts executions and reads one: each request is answered
within ``ORBIT_POSTGRES_REQUEST_TIMEOUT_SECONDS`` twice over (the wait for a pooled
connection, then the statement), with a margin for a busy machine, and with 503
``UNAVAILABLE`` and ``Retry-After`` when Postgres did not answer. Once it thaws,
with nothing restarted, the starts it refused go through and complete.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from orbit_model.views import view_json
from orbit_services.gateway.errors import RETRY_AFTER_SECONDS
from tests.e2e.stack import running_stack
from tests.integration.conftest import OrbitEnv

from .postgres import PrivatePostgres, private_directory
from .workflows import ONE_STEP_YAML, echo

REQUEST_TIMEOUT = 1.0
"""The gateway's ``ORBIT_POSTGRES_REQUEST_TIMEOUT_SECONDS`` here (5 s by default)."""
ANSWER_BOUND = 2 * REQUEST_TIMEOUT + 8.0
"""The longest a request may wait for its answer while Postgres is frozen: the wait for
a connection and the statement, each bounded, and a margin for a busy machine."""
FROZEN_SECONDS = 3 * ANSWER_BOUND
"""Long enough that a request held for the whole freeze could not pass for answered."""
REQUESTS = 12
RECOVERY_TIMEOUT = 120.0


@pytest.fixture
def postgres() -> Iterator[PrivatePostgres]:
    with private_directory() as directory:
        server = PrivatePostgres(directory)
        try:
            server.start()
            yield server
        finally:
            server.stop()


async def _timed(http: httpx.AsyncClient, method: str, path: str, **kw: Any) -> tuple[float, Any]:
    began = time.monotonic()
    try:
        response = await http.request(method, path, **kw)
    except httpx.HTTPError as error:
        return time.monotonic() - began, repr(error)
    return time.monotonic() - began, response


@pytest.mark.timeout(600)  # generous: only a failing run comes near it
async def test_a_frozen_postgres_gets_every_request_answered_in_time(
    orbit_env: OrbitEnv, postgres: PrivatePostgres
) -> None:
    await postgres.create_orbit_database()
    settings = orbit_env.settings_with(
        database_url=postgres.url, postgres_request_timeout_seconds=REQUEST_TIMEOUT
    )
    async with (
        running_stack(settings, [echo]) as stack,
        httpx.AsyncClient(
            base_url=stack.client.url,
            headers={"authorization": f"Bearer {stack.token}"} if stack.token else {},
            timeout=FROZEN_SECONDS * 2,
        ) as http,
    ):
        await stack.client.deploy(ONE_STEP_YAML)
        await stack.client.start("one-step", {"n": -1}, execution_id="before", wait=True)
        await asyncio.to_thread(postgres.freeze)
        try:
            frozen_at = time.monotonic()
            answers = await asyncio.gather(
                *(
                    _timed(
                        http,
                        "POST",
                        "/v1/executions",
                        json={"workflow": "one-step", "input": {"n": n}, "execution_id": f"f-{n}"},
                    )
                    for n in range(REQUESTS)
                ),
                *(_timed(http, "GET", "/v1/executions/before") for _ in range(REQUESTS)),
            )
            answered_within = time.monotonic() - frozen_at
        finally:
            await asyncio.to_thread(postgres.thaw)
        slowest = max(took for took, _ in answers)
        print(f"{len(answers)} requests while frozen, the slowest answered in {slowest:.2f} s")
        assert answered_within < FROZEN_SECONDS  # answered while frozen, not after
        for took, response in answers:
            assert isinstance(response, httpx.Response), response
            assert took < ANSWER_BOUND, f"{took:.1f} s"
            if response.status_code >= 300:
                assert response.status_code == 503, response.text
                assert response.json()["error"]["code"] == "UNAVAILABLE"
                assert response.headers["Retry-After"] == str(RETRY_AFTER_SECONDS)
        # Thawed, nothing restarted: a start refused while frozen is sent again, and
        # every start completes.
        for n in range(REQUESTS):
            await stack.client.start("one-step", {"n": n}, execution_id=f"f-{n}")
        for n in range(REQUESTS):
            done = view_json(await stack.client.wait(f"f-{n}", timeout=RECOVERY_TIMEOUT))
            assert (done["status"], done["output"]) == ("completed", {"n": n})
