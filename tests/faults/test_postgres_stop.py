"""Postgres stopped with ``-m immediate`` under load: nothing lost, nothing stuck, no 500.

Every service runs in the test against a private Postgres cluster (see
:mod:`.postgres`) and the shared RabbitMQ, in a namespace of the test's own.
While a few dozen three-step executions run, and a client keeps starting
more, Postgres is stopped hard (every backend killed, as a crash would) and
kept down a few seconds. Meanwhile the API answers reads and starts with 503
``UNAVAILABLE`` and ``Retry-After``, never a 500; a start refused so was not
half done, and is simply sent again later. Once Postgres is back (after crash
recovery), with no service restarted, every execution completes with the
right output, and each task's side effect, counted here outside Orbit by
idempotency key, ran at least once and seldom more.
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import httpx
import pytest

from orbit_model.events import StepSucceeded, WorkflowCompleted
from orbit_sdk import OrbitClientError, TaskContext, task
from orbit_services.decider.service import DeciderService
from orbit_services.gateway.errors import RETRY_AFTER_SECONDS
from orbit_services.store import EventStore
from tests.e2e.stack import Stack, running_stack
from tests.integration.conftest import OrbitEnv
from tests.integration.eventually import eventually
from tests.views import as_sent

from .postgres import PrivatePostgres, private_directory

EXECUTIONS = 40
STEPS = ("a", "b", "c")
STEP_SECONDS = 0.15
"""How long each step's task takes: with :data:`CONCURRENCY`, the load outlasts the outage."""
CONCURRENCY = 8
OUTAGE_SECONDS = 4.0
PROBE_INTERVAL = 0.25
PROBED_STARTS = 3
"""Distinct ids the probe starts while Postgres is away (each refused, then sent again)."""
STARTER_INTERVAL = 0.2
"""A client starting an execution this often, from just before the stop to the restart."""
RECOVERY_TIMEOUT = 120.0
"""Seconds, from Postgres back up, for every execution to complete: a few on an idle
machine; generous, for a loaded one."""
MAX_RUNS_PER_UNIT = 2

RELAY = """
orbit: 1
workflow: relay
version: 1.0.0
tasks:
  hop: {version: "1"}
steps:
  - id: a
    task: hop
    input: {n: "${ input.n }"}
  - id: b
    task: hop
    input: {n: "${ steps.a.output.n }"}
  - id: c
    task: hop
    input: {n: "${ steps.b.output.n }"}
output:
  n: ${ steps.c.output.n }
"""

runs: Counter[str] = Counter()
"""The side effect outside Orbit: runs of each unit, by idempotency key."""


@task("hop", version="1")
async def hop(inp: dict[str, Any], ctx: TaskContext) -> dict[str, Any]:
    runs[ctx.idempotency_key] += 1
    await asyncio.sleep(STEP_SECONDS)
    return {"n": inp["n"] + 1}


@pytest.fixture
def postgres() -> Iterator[PrivatePostgres]:
    with private_directory() as directory:
        server = PrivatePostgres(directory)
        try:
            server.start()
            yield server
        finally:
            server.stop()


@dataclass(frozen=True)
class Answer:
    """One answer of the API: its status, error code and ``Retry-After``."""

    request: str
    status: int
    code: str | None
    retry_after: str | None

    @property
    def unavailable(self) -> bool:
        return (
            self.status == 503
            and self.code == "UNAVAILABLE"
            and self.retry_after == str(RETRY_AFTER_SECONDS)
        )


async def _ask(http: httpx.AsyncClient, request: str, method: str, path: str, **kw: Any) -> Answer:
    try:
        response = await http.request(method, path, **kw)
    except httpx.HTTPError as error:  # no answer at all (a hang, a dropped connection)
        return Answer(request, 0, repr(error), None)
    code = None
    if response.is_error:
        try:
            code = response.json()["error"]["code"]
        except (ValueError, KeyError, TypeError):
            code = None
    return Answer(request, response.status_code, code, response.headers.get("Retry-After"))


def _start_body(execution_id: str, n: int) -> dict[str, Any]:
    return {"workflow": "relay", "input": {"n": n}, "execution_id": execution_id}


async def _probe_outage(http: httpx.AsyncClient, read_id: str, seconds: float) -> list[Answer]:
    """A read, a long-poll read and a start, again and again for ``seconds``: every answer."""
    answers: list[Answer] = []
    deadline = time.monotonic() + seconds
    rounds = 0
    while time.monotonic() < deadline:
        n = rounds % PROBED_STARTS
        answers += await asyncio.gather(
            _ask(http, "read", "GET", f"/v1/executions/{read_id}"),
            _ask(http, "wait", "GET", f"/v1/executions/{read_id}", params={"wait": "1"}),
            _ask(http, "start", "POST", "/v1/executions", json=_start_body(f"down-{n}", n)),
        )
        rounds += 1
        await asyncio.sleep(PROBE_INTERVAL)
    return answers


async def _keep_starting(
    http: httpx.AsyncClient, until: asyncio.Event, answers: dict[str, Answer]
) -> None:
    """Start ``race-N`` executions one after another until ``until`` is set; each one's
    answer into ``answers``."""
    while not until.is_set():
        execution_id = f"race-{len(answers)}"
        body = _start_body(execution_id, len(answers))
        answers[execution_id] = await _ask(http, "start", "POST", "/v1/executions", json=body)
        await asyncio.sleep(STARTER_INTERVAL)


async def _readable(stack: Stack, execution_id: str) -> bool:
    try:
        await stack.client.get(execution_id)
    except OrbitClientError:
        return False
    return True


@pytest.mark.timeout(600)  # generous: only a failing run comes near it
async def test_an_immediate_stop_of_postgres_loses_nothing_and_answers_503(
    orbit_env: OrbitEnv, postgres: PrivatePostgres
) -> None:
    await postgres.create_orbit_database()
    settings = orbit_env.settings_with(database_url=postgres.url)
    runs.clear()
    # Every execution that must complete, and its input n (its output is n + 3).
    inputs = {f"load-{n}": n for n in range(EXECUTIONS)}
    units = EXECUTIONS * len(STEPS)
    async with (
        running_stack(settings, [hop], concurrency=CONCURRENCY) as stack,
        httpx.AsyncClient(base_url=stack.client.url, timeout=10) as http,
    ):
        client = stack.client
        decider = stack.services["decider"]
        assert isinstance(decider, DeciderService)
        await client.deploy(RELAY)
        await asyncio.gather(
            *(client.start("relay", {"n": n}, execution_id=i) for i, n in inputs.items())
        )

        async def ran() -> int:
            return sum(runs.values())

        async def committed() -> int:
            return decider.batches

        # Stop it mid-run, some steps done, most not, while a client keeps starting more.
        await eventually(ran, lambda done: done >= units // 4, timeout=120, what="a quarter run")
        starter_done = asyncio.Event()
        raced: dict[str, Answer] = {}
        starter = asyncio.create_task(_keep_starting(http, starter_done, raced))

        async def accepted() -> int:
            return sum(200 <= answer.status < 300 for answer in raced.values())

        try:
            # The starter has had a start accepted, so it races the stop from a live API.
            await eventually(accepted, timeout=120, what="a racing start accepted")
            await asyncio.to_thread(postgres.stop_immediate)
            ran_before = await ran()
            batches_at_stop = await committed()
            answers = await _probe_outage(http, "load-0", OUTAGE_SECONDS)
            ran_while_down = await ran() - ran_before
        finally:
            starter_done.set()
            await starter
        await asyncio.to_thread(postgres.start)
        back = time.monotonic()
        await eventually(lambda: _readable(stack, "load-0"), timeout=RECOVERY_TIMEOUT)
        read_again = time.monotonic() - back
        await eventually(
            committed,
            lambda batches: batches > batches_at_stop,
            timeout=RECOVERY_TIMEOUT,
            what="a decision committed",
        )
        deciding_again = time.monotonic() - back

        # A start refused with 503 while Postgres was away was not half done: it is not
        # there, and is sent again. One refused as Postgres went may have been committed.
        for n in range(PROBED_STARTS):
            with pytest.raises(OrbitClientError) as missing:
                await client.get(f"down-{n}")
            assert missing.value.status == 404, missing.value
            assert (await client.start("relay", {"n": n}, execution_id=f"down-{n}"))["created"]
            inputs[f"down-{n}"] = n
        resent: Counter[str] = Counter()
        for execution_id, answer in raced.items():
            n = int(execution_id.split("-")[1])
            inputs[execution_id] = n
            if answer.unavailable:
                started = await client.start("relay", {"n": n}, execution_id=execution_id)
                resent["created" if started["created"] else "known"] += 1

        finished = await asyncio.gather(
            *(as_sent(client.wait(i, timeout=RECOVERY_TIMEOUT)) for i in inputs)
        )
        all_done = time.monotonic() - back

    wrong = [
        (i, e["status"], e.get("output"))
        for i, e in zip(inputs, finished, strict=True)
        if e["status"] != "completed" or e.get("output") != {"n": inputs[i] + len(STEPS)}
    ]
    assert not wrong, wrong

    # The history: each step succeeded once, each execution completed once.
    store = await EventStore.connect(postgres.url)
    try:
        for execution_id in inputs:
            events = [stored.event for stored in await store.read_events(execution_id)]
            succeeded = Counter(e.unit for e in events if isinstance(e, StepSucceeded))
            assert succeeded == dict.fromkeys(STEPS, 1), (execution_id, succeeded)
            assert sum(isinstance(e, WorkflowCompleted) for e in events) == 1, execution_id
    finally:
        await store.close()

    # The side effect outside Orbit: every unit ran, and at most a little more than once.
    keys = {f"{i}:{step}" for i in inputs for step in STEPS}
    assert set(runs) == keys, sorted(set(runs) ^ keys)
    most = max(runs.values())

    probed = Counter(a.request for a in answers if a.unavailable)
    others = [a for a in answers if not a.unavailable]
    raced_ok = sum(200 <= a.status < 300 for a in raced.values())
    raced_503 = sum(a.unavailable for a in raced.values())
    raced_other = [a for a in raced.values() if not a.unavailable and not 200 <= a.status < 300]
    print(
        f"\nwhile Postgres was down ({OUTAGE_SECONDS:g} s): {len(answers)} probe answers,"
        f" {probed.total()} of them 503 UNAVAILABLE with Retry-After ({dict(probed)}),"
        f" others {others};"
        f"\nthe racing client's {len(raced)} starts: {raced_ok} accepted,"
        f" {raced_503} answered 503 (sent again: {dict(resent)}), others {raced_other};"
        f"\n{ran_before} of {units} first-load steps had run at the stop,"
        f" {ran_while_down} began while it was down (dispatched before);"
        f"\nPostgres back: the API read in {read_again:.2f} s, the decider committed in"
        f" {deciding_again:.2f} s, all {len(inputs)} executions completed in {all_done:.2f} s;"
        f"\nunits by runs: {dict(Counter(runs.values()))}, max runs per unit {most}"
    )
    assert not others, others
    assert set(probed) == {"read", "wait", "start"}, probed
    assert not raced_other, raced_other
    assert raced_ok, raced
    assert raced_503, raced
    assert ran_before < units, "the load was over before Postgres stopped"
    assert most <= MAX_RUNS_PER_UNIT, {k: v for k, v in runs.items() if v > MAX_RUNS_PER_UNIT}
