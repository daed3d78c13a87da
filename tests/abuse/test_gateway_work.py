"""Requests by clients with narrow tokens that make the gateway work (issue 31: items 1-5
and 13), each sent over and over while a client with a token is probed and the gateway's
memory measured (:mod:`.harness`):

- the console's pages of a definition whose 140 steps each come after every earlier one
  (a reader's session; the step graph took 23 s a page and 3 GB at 440 steps);
- definitions past the compiler's limits (``definitions:write``): 20,000 steps as YAML
  and as IR, a 200 KB string aliased 1,000 times;
- a ``pattern`` a backtracking engine takes seconds over (``executions:start`` and
  ``executions:signal``);
- queries that spend their whole expression budget, or would build 100 MB of one
  string (``executions:read``).

Each attack is under way once each of its requests has been answered once, as it must be
(refused, or a page of the fallback table), and it goes on sending while the probes run.
The decider's side of item 5 (an input's ``map`` over 15,000 elements) is held by
``tests/unit/test_expression_budget.py`` and has no gateway in it.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field

import httpx
import pytest

from orbit_model.access import TokenScope
from orbit_services.store import EventStore
from tests.integration.conftest import OrbitEnv
from tests.integration.test_console_bounds import dense
from tests.integration.test_definition_limits import aliased, many_steps, many_steps_as_ir
from tests.integration.test_expression_limits import COSTLY_QUERIES
from tests.integration.test_redos import EVIL, PATTERNED

from .harness import Attack, GatewayProcess, gateway_process, under_attack

pytestmark = pytest.mark.abuse

FIRST_ANSWERS_WITHIN = 120.0
"""How long each request of an attack may take to be answered a first time: a second or
two on an idle machine."""
YAML = {"content-type": "application/yaml"}
JSON = {"content-type": "application/json"}


@dataclass
class Targets:
    """What the attacks aim at, made ready by an admin, and the narrow tokens they use."""

    dense_execution: str
    patterned_execution: str
    costly_execution: str
    tokens: dict[TokenScope, str] = field(default_factory=dict)


async def prepare(env: OrbitEnv, gateway: GatewayProcess) -> Targets:
    """Register the definitions the attacks use, start one execution of each, and make a
    token of each scope an attack needs (the reader's is the gateway's)."""
    headers = {"authorization": f"Bearer {gateway.admin_token}"}
    async with httpx.AsyncClient(base_url=gateway.url, headers=headers, timeout=60) as admin:
        for body in (dense(140), PATTERNED, COSTLY_QUERIES):
            registered = await admin.post("/v1/definitions", content=body, headers=YAML)
            assert registered.status_code == 201, registered.text
        started = {}
        for workflow, given in (
            ("dense", None),
            ("patterned", {"code": "aaa"}),
            ("costly-queries", {"s": "a"}),
        ):
            answer = await admin.post("/v1/executions", json={"workflow": workflow, "input": given})
            assert answer.status_code in (200, 201), answer.text
            started[workflow] = answer.json()["execution_id"]
    store = await EventStore.connect(env.settings.database_url, min_size=1, max_size=1)
    try:
        tokens = {TokenScope.EXECUTIONS_READ: gateway.reader_token}
        for scope in (
            TokenScope.DEFINITIONS_WRITE,
            TokenScope.EXECUTIONS_START,
            TokenScope.EXECUTIONS_SIGNAL,
        ):
            _, tokens[scope] = await store.tokens.create(
                f"abuse-{scope.name.lower()}", frozenset({scope})
            )
    finally:
        await store.close()
    return Targets(started["dense"], started["patterned"], started["costly-queries"], tokens)


Request = Callable[[httpx.AsyncClient], Awaitable[httpx.Response]]


@contextlib.asynccontextmanager
async def repeatedly(
    gateway: GatewayProcess,
    requests: list[tuple[Request, int]],
    token: str | None = None,
    sign_in: bool = False,
) -> AsyncIterator[None]:
    """An attack sending each of ``requests`` over and over, each on a loop of its own,
    until it ends; under way once each has been answered once with its status. With
    ``sign_in``, the client signs in to the console with ``token`` first."""
    headers = {} if token is None or sign_in else {"authorization": f"Bearer {token}"}
    async with httpx.AsyncClient(base_url=gateway.url, headers=headers, timeout=300) as client:
        if sign_in:
            assert token is not None
            await _sign_in(client, token)
        answered = [asyncio.Event() for _ in requests]
        wrong: list[str] = []

        async def loop(request: Request, status: int, first: asyncio.Event) -> None:
            while True:
                with contextlib.suppress(httpx.HTTPError):
                    answer = await request(client)
                    if answer.status_code != status:
                        wrong.append(f"{answer.status_code}: {answer.text[:200]}")
                    first.set()

        loops = [
            asyncio.create_task(loop(request, status, first))
            for (request, status), first in zip(requests, answered, strict=True)
        ]
        try:
            async with asyncio.timeout(FIRST_ANSWERS_WITHIN):
                await asyncio.gather(*(first.wait() for first in answered))
            assert not wrong, wrong
            yield
            assert not wrong, wrong
        finally:
            for task in loops:
                task.cancel()
            await asyncio.gather(*loops, return_exceptions=True)


async def _sign_in(client: httpx.AsyncClient, token: str) -> None:
    login = await client.get("/ui/login")
    csrf = re.search(r'name="csrf" value="([^"]+)"', login.text)
    assert csrf is not None, login.text[:500]
    form = {"csrf": csrf[1], "token": token, "next": "/ui"}
    answer = await client.post("/ui/login", data=form)
    assert answer.status_code == 303, answer.text[:500]


def _get(path: str) -> Request:
    return lambda client: client.get(path, headers={"accept": "text/html"})


def _post(path: str, *, json: object = None, body: str | bytes | None = None) -> Request:
    if body is not None:
        headers = JSON if isinstance(body, bytes) else YAML
        return lambda client: client.post(path, content=body, headers=headers)
    return lambda client: client.post(path, json=json)


def graph_pages(gateway: GatewayProcess, targets: Targets) -> Attack:
    """Item 1: the pages of a definition whose steps each come after every earlier one."""
    pages = ["/ui/definitions/dense/1.0.0", f"/ui/executions/{targets.dense_execution}"]
    token = targets.tokens[TokenScope.EXECUTIONS_READ]
    return repeatedly(gateway, [(_get(page), 200) for page in pages], token, sign_in=True)


def huge_definitions(gateway: GatewayProcess, targets: Targets) -> Attack:
    """Items 2 and 3: definitions past the compiler's limits, refused 400."""
    bodies: list[str | bytes] = [many_steps(20_000), aliased(200_000), many_steps_as_ir(10_000)]
    requests = [(_post("/v1/definitions", body=body), 400) for body in bodies]
    return repeatedly(gateway, requests, targets.tokens[TokenScope.DEFINITIONS_WRITE])


def catastrophic_patterns(gateway: GatewayProcess, targets: Targets) -> Attack:
    """Item 4: starts and signals a backtracking ``pattern`` would take seconds over."""
    start = _post("/v1/executions", json={"workflow": "patterned", "input": {"code": EVIL}})
    signal = _post(
        f"/v1/executions/{targets.patterned_execution}/signals/code", json={"code": EVIL}
    )
    starting = repeatedly(gateway, [(start, 400)], targets.tokens[TokenScope.EXECUTIONS_START])
    signalling = repeatedly(gateway, [(signal, 422)], targets.tokens[TokenScope.EXECUTIONS_SIGNAL])
    return _together(starting, signalling)


def costly_queries(gateway: GatewayProcess, targets: Targets) -> Attack:
    """Items 5 and 13: queries that spend their budget, or would build 100 MB."""
    queries = f"/v1/executions/{targets.costly_execution}/queries"
    requests = [(_get(f"{queries}/nested"), 422), (_get(f"{queries}/blown"), 422)]
    return repeatedly(gateway, requests, targets.tokens[TokenScope.EXECUTIONS_READ])


@contextlib.asynccontextmanager
async def _together(*attacks: Attack) -> AsyncIterator[None]:
    async with contextlib.AsyncExitStack() as stack:
        for attack in attacks:
            await stack.enter_async_context(attack)
        yield


def work_attacks(gateway: GatewayProcess, targets: Targets) -> list[Attack]:
    """Every attack of this module."""
    return [
        graph_pages(gateway, targets),
        huge_definitions(gateway, targets),
        catastrophic_patterns(gateway, targets),
        costly_queries(gateway, targets),
    ]


async def test_requests_that_make_the_gateway_work(orbit_env: OrbitEnv) -> None:
    async with gateway_process(orbit_env) as gateway:
        targets = await prepare(orbit_env, gateway)
        measured = await under_attack(gateway, *work_attacks(gateway, targets))
    measured.check()
