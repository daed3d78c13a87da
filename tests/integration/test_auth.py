"""API tokens at the gateway: the auth matrix of docs/security.md, tried route by route.

The table in ``docs/security.md`` ("Who may call what") is the specification:
this module reads it and asserts, for every route, what no token, a malformed,
wrong, expired or revoked token, each scope alone, ``admin`` and a token
narrowed to other workflows get.
"""

from __future__ import annotations

import re
from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest

from orbit_model.access import TokenScope
from orbit_model.errors import OrbitError
from orbit_sdk.credentials import saved_token
from orbit_services.commands.dev import dev_token
from orbit_services.store.tokens import new_secret

from .conftest import OrbitEnv
from .test_gateway import Gateway, error_of, running

SECURITY_DOC = Path(__file__).parents[2] / "docs" / "security.md"
MINE = "mine-approve"
OTHER = "other-approve"


def _workflow(name: str) -> str:
    return f"""\
orbit: 1
workflow: {name}
version: 1.0.0
signals:
  go: {{type: object}}
queries:
  stage: ${{ steps.wait.status }}
steps:
  - id: wait
    await: go
"""


@dataclass(frozen=True)
class Row:
    method: str
    path: str
    scope: str  # a scope's name, "any token" or "none"
    narrowed: str  # the answer for a token narrowed to other workflows


def _table() -> list[Row]:
    """The rows of the route table of docs/security.md."""
    text = SECURITY_DOC.read_text(encoding="utf-8")
    section = text.split("## Who may call what", 1)[1].split("\n## ", 1)[0]
    rows = []
    for line in section.splitlines():
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        if len(cells) != 3 or not cells[0].startswith("`"):
            continue
        # The first scope named is the route's; a note may follow ("and ... with ?wait=").
        named = re.match(r"`([^`]+)`", cells[1])
        scope = named[1] if named else cells[1]
        for route in re.findall(r"`(GET|POST) ([^`]+)`", cells[0]):
            rows.append(Row(route[0], route[1], scope, cells[2]))
    return rows


ROWS = _table()


async def test_the_table_names_every_route_of_the_api(gateway: Gateway) -> None:
    """No route escapes the matrix: each one the API describes is a row of the table."""
    document = (await gateway.client.get("/openapi.json")).json()
    served = {
        (method.upper(), _generic(path))
        for path, operations in document["paths"].items()
        for method in operations
    }
    served |= {("GET", "/openapi.json"), ("GET", "/docs"), ("GET", "/redoc")}
    served |= {("GET", "/"), ("GET", "/favicon.ico")}  # the front pages (console/front.py)
    assert served == {(row.method, _generic(row.path)) for row in ROWS}


def _generic(path: str) -> str:
    return re.sub(r"\{[^}]+\}", "{}", path)


@dataclass
class Fixture:
    gateway: Gateway
    tokens: dict[str, str]  # case name → secret
    mine: str  # an execution of MINE
    other: str  # an execution of OTHER


@pytest.fixture
async def gateway(orbit_env: OrbitEnv) -> AsyncIterator[Gateway]:
    async with running(orbit_env, orbit_env.settings_with(auth="tokens")) as gateway:
        yield gateway


@pytest.fixture
async def world(gateway: Gateway) -> Fixture:
    tokens = gateway.store.tokens
    secrets: dict[str, str] = {}
    for scope in TokenScope:
        name = scope.value.replace(":", "-")
        _, secrets[scope.value] = await tokens.create(name, frozenset({scope}))
    every = frozenset(TokenScope) - {TokenScope.ADMIN}
    _, secrets["narrowed"] = await tokens.create("narrowed", every, ("mine-*",))
    past = datetime.now(UTC) - timedelta(seconds=1)
    _, secrets["expired"] = await tokens.create("expired", frozenset(TokenScope), (), past)
    _, secrets["revoked"] = await tokens.create("revoked", frozenset({TokenScope.ADMIN}))
    await tokens.revoke("revoked")
    admin = {"authorization": f"Bearer {secrets['admin']}"}
    for name in (MINE, OTHER):
        registered = await gateway.client.post(
            "/v1/definitions", content=_workflow(name), headers={**admin, **YAML}
        )
        assert registered.status_code == 201, registered.text
    ids = []
    for name in (MINE, OTHER):
        started = await gateway.client.post(
            "/v1/executions", json={"workflow": name}, headers=admin
        )
        assert started.status_code == 201, started.text
        ids.append(started.json()["execution_id"])
    return Fixture(gateway, secrets, ids[0], ids[1])


YAML = {"content-type": "application/yaml"}


def _request(row: Row, world: Fixture, workflow: str) -> dict[str, Any]:
    """A request of ``row`` that succeeds with the right token, about ``workflow``."""
    execution = world.mine if workflow == MINE else world.other
    path = (
        row.path.replace("{id}", execution)
        .replace("{name}/{version}", f"{workflow}/1.0.0")
        .replace("queries/{name}", "queries/stage")
        .replace("signals/{name}", "signals/go")
    )
    request: dict[str, Any] = {"method": row.method, "url": path}
    if row.path == "/v1/definitions" and row.method == "POST":
        request.update(content=_workflow(workflow), headers=YAML)
    elif row.path == "/v1/executions" and row.method == "POST":
        request["json"] = {"workflow": workflow}
    elif row.path == "/v1/executions/batch":
        request["json"] = {"executions": [{"workflow": workflow}]}
    elif row.path.endswith("/signals/{name}"):
        request["json"] = {}
    elif row.path.endswith("/cancel"):
        request["json"] = {"reason": "matrix"}
    elif row.path == "/v1/tokens" and row.method == "POST":
        request["json"] = {"name": f"made-{new_secret()[-8:]}", "scopes": ["workers:read"]}
    elif row.path.startswith("/v1/tokens/"):
        request["url"] = "/v1/tokens/revoked/revoke"
    return request


async def _send(world: Fixture, request: dict[str, Any], token: str | None) -> httpx.Response:
    headers = dict(request.get("headers", {}))
    if token is not None:
        headers["authorization"] = token
    return await world.gateway.client.request(**{**request, "headers": headers})


def _outcome(response: httpx.Response) -> str:
    if response.is_success:
        return "ok"
    status, code, _ = error_of(response)
    return f"{status} {code}"


async def test_every_route_answers_every_token_as_the_table_says(world: Fixture) -> None:
    bearer = {name: f"Bearer {secret}" for name, secret in world.tokens.items()}
    refused = {
        "no token": None,
        "an empty bearer": "Bearer ",
        "another scheme": f"Basic {world.tokens['admin']}",
        "a wrong token": f"Bearer {new_secret()}",
        "an expired token": bearer["expired"],
        "a revoked token": bearer["revoked"],
    }
    wrong: list[str] = []
    for row in ROWS:
        request = _request(row, world, MINE)
        if row.scope == "none":
            for case, token in refused.items():
                if (outcome := _outcome(await _send(world, request, token))) != "ok":
                    wrong.append(f"{row.method} {row.path} with {case}: {outcome}")
            continue
        for case, token in refused.items():
            outcome = _outcome(await _send(world, request, token))
            if outcome != "401 UNAUTHENTICATED":
                wrong.append(f"{row.method} {row.path} with {case}: {outcome}")
        for scope in TokenScope:
            allowed = row.scope in ("any token", scope.value) or scope is TokenScope.ADMIN
            outcome = _outcome(await _send(world, request, bearer[scope.value]))
            expected = "ok" if allowed else "403 PERMISSION_DENIED"
            if outcome != expected:
                wrong.append(f"{row.method} {row.path} with {scope.value}: {outcome}")
    assert not wrong, "\n".join(wrong)


async def test_a_start_that_waits_needs_the_read_scope_too(world: Fixture) -> None:
    """``POST /v1/executions?wait=`` answers the execution's view: starting alone is not
    enough, and it is refused before anything starts."""
    request = {"method": "POST", "url": "/v1/executions?wait=0", "json": {"workflow": MINE}}
    refused = await _send(world, request, f"Bearer {world.tokens['executions:start']}")
    assert error_of(refused)[:2] == (403, "PERMISSION_DENIED")
    listed = await world.gateway.client.get(
        "/v1/executions", headers={"authorization": f"Bearer {world.tokens['admin']}"}
    )
    assert len(listed.json()["items"]) == 2, "the refused start started nothing"
    both = frozenset({TokenScope.EXECUTIONS_START, TokenScope.EXECUTIONS_READ})
    _, secret = await world.gateway.store.tokens.create("start-and-read", both)
    answered = await _send(world, request, f"Bearer {secret}")
    assert answered.status_code == 201, answered.text
    assert answered.json()["execution"]["status"] == "running"


async def test_a_narrowed_token_reaches_its_workflows_only(world: Fixture) -> None:
    token = f"Bearer {world.tokens['narrowed']}"
    wrong: list[str] = []
    for row in ROWS:
        if row.scope in ("none", "admin"):
            continue
        match = re.match(r"(\d{3}) `([A-Z_]+)`", row.narrowed)
        expected = f"{match[1]} {match[2]}" if match else "ok"
        mine = _outcome(await _send(world, _request(row, world, MINE), token))
        # "on every workflow": a route that is no workflow's refuses narrowed tokens.
        own = expected if "on every workflow" in row.narrowed else "ok"
        if mine != own:
            wrong.append(f"{row.method} {row.path} on its own workflow: {mine}")
        other = _outcome(await _send(world, _request(row, world, OTHER), token))
        if other != expected:
            wrong.append(f"{row.method} {row.path} on another workflow: {other}")
    assert not wrong, "\n".join(wrong)

    # A batch answers 200, and refuses the starts of other workflows in their results.
    batch = {"executions": [{"workflow": MINE}, {"workflow": OTHER}]}
    started = await _send(
        world, {"method": "POST", "url": "/v1/executions/batch", "json": batch}, token
    )
    [own, others] = started.json()["results"]
    assert own["created"], own
    assert (others["created"], others["error"]["code"]) == (False, "PERMISSION_DENIED"), others

    # What lists answer: only the workflows it covers.
    listed = await _send(world, {"method": "GET", "url": "/v1/executions"}, token)
    assert {item["workflow"] for item in listed.json()["items"]} == {MINE}
    definitions = await _send(world, {"method": "GET", "url": "/v1/definitions"}, token)
    assert {item["name"] for item in definitions.json()} == {MINE}
    filtered = await _send(
        world, {"method": "GET", "url": f"/v1/executions?workflow={OTHER}"}, token
    )
    assert error_of(filtered)[:2] == (403, "PERMISSION_DENIED")
    # Nor through a child: a definition it registers may start only its workflows.
    parent = _workflow("mine-parent").replace(
        "steps:\n", f"steps:\n  - id: child\n    workflow: {OTHER}@1.0.0\n"
    )
    registered = await _send(
        world,
        {"method": "POST", "url": "/v1/definitions", "content": parent, "headers": YAML},
        token,
    )
    assert error_of(registered)[:2] == (403, "PERMISSION_DENIED")
    # An id no execution has yet is refused as well: by the time a signal is recorded,
    # another workflow's execution could have it.
    missing = await _send(world, {"method": "GET", "url": "/v1/executions/not-yet"}, token)
    assert error_of(missing)[:2] == (404, "NOT_FOUND")


async def test_a_revoked_token_is_refused_at_once_by_every_gateway(
    orbit_env: OrbitEnv, gateway: Gateway
) -> None:
    _, secret = await gateway.store.tokens.create(
        "short-lived", frozenset({TokenScope.WORKERS_READ})
    )
    headers = {"authorization": f"Bearer {secret}"}
    async with running(orbit_env, orbit_env.settings_with(auth="tokens")) as replica:
        for each in (gateway, replica):
            assert (await each.client.get("/v1/workers", headers=headers)).status_code == 200
        await gateway.store.tokens.revoke("short-lived")
        for each in (gateway, replica):
            answer = await each.client.get("/v1/workers", headers=headers)
            assert error_of(answer)[:2] == (401, "UNAUTHENTICATED")
            assert answer.headers["www-authenticate"].startswith("Bearer")


async def test_tokens_keep_only_a_digest_and_record_their_last_use(gateway: Gateway) -> None:
    row, secret = await gateway.store.tokens.create("ops", frozenset({TokenScope.WORKERS_READ}))
    assert row.last_used_at is None
    stored = await gateway.database.fetch("SELECT digest::text AS digest FROM api_tokens")
    assert all(secret not in item["digest"] for item in stored)
    answer = await gateway.client.get("/v1/workers", headers={"authorization": f"Bearer {secret}"})
    assert answer.status_code == 200
    (listed,) = [token for token in await gateway.store.tokens.list() if token.name == "ops"]
    assert listed.last_used_at is not None


async def test_metrics_are_open_only_when_configured(orbit_env: OrbitEnv) -> None:
    closed = orbit_env.settings_with(auth="tokens")
    async with running(orbit_env, closed) as gateway:
        assert error_of(await gateway.client.get("/metrics"))[:2] == (401, "UNAUTHENTICATED")
    public = orbit_env.settings_with(auth="tokens", metrics_public=True)
    async with running(orbit_env, public) as gateway:
        assert (await gateway.client.get("/metrics")).status_code == 200
        assert error_of(await gateway.client.get("/v1/workers"))[:2] == (401, "UNAUTHENTICATED")


async def test_tokens_are_managed_over_http_by_an_admin(world: Fixture) -> None:
    admin = {"authorization": f"Bearer {world.tokens['admin']}"}
    client = world.gateway.client
    made = await client.post(
        "/v1/tokens",
        json={"name": "ci", "scopes": ["executions:start"], "expires_in": "30d"},
        headers=admin,
    )
    assert made.status_code == 201, made.text
    secret = made.json()["token"]
    assert secret.startswith("orbit_")
    listed = {item["name"]: item for item in (await client.get("/v1/tokens", headers=admin)).json()}
    assert "token" not in listed["ci"]
    assert listed["ci"]["scopes"] == ["executions:start"]
    assert listed["ci"]["expires_at"] is not None
    again = await client.post("/v1/tokens", json={"name": "ci", "scopes": ["admin"]}, headers=admin)
    assert error_of(again)[:2] == (409, "TOKEN_EXISTS")
    for bad in (
        {"name": "x", "scopes": ["root"]},
        {"name": "x", "scopes": ["admin"], "workflows": ["a*"]},
        {"name": "x", "scopes": ["admin"], "expires_in": "soon"},
        {"name": "bad name", "scopes": ["admin"]},
        {"name": "x", "scopes": ["admin"], "workflows": ["UPPER"]},
    ):
        answer = await client.post("/v1/tokens", json=bad, headers=admin)
        assert error_of(answer)[:2] == (400, "INVALID_REQUEST"), bad
    revoked = await client.post("/v1/tokens/ci/revoke", headers=admin)
    assert revoked.json()["revoked_at"] is not None
    missing = await client.post("/v1/tokens/nobody/revoke", headers=admin)
    assert error_of(missing)[:2] == (404, "NOT_FOUND")


async def test_a_secret_made_elsewhere_is_ascii_without_dots_and_made_again_only_alike(
    gateway: Gateway,
) -> None:
    tokens = gateway.store.tokens
    reader = frozenset({TokenScope.EXECUTIONS_READ})
    for bad in ("a.b." + "c" * 40, "é" * 40, "short", "with space " + "x" * 40):
        with pytest.raises(OrbitError) as refused:
            await tokens.create("managed", reader, secret=bad)
        assert refused.value.code == "INVALID_REQUEST"
    secret = "m" * 40
    await tokens.create("managed", reader, secret=secret)
    await tokens.create("managed", reader, secret=secret)  # the same again: no change
    with pytest.raises(OrbitError) as wider:
        await tokens.create("managed", frozenset({TokenScope.ADMIN}), secret=secret)
    assert wider.value.code == "TOKEN_EXISTS"
    (row,) = await tokens.list()
    assert row.scopes == ("executions:read",)


async def test_a_failure_while_checking_a_token_is_a_json_error_without_its_cause(
    gateway: Gateway,
) -> None:
    await gateway.database.execute("ALTER TABLE api_tokens RENAME TO api_tokens_gone")
    answer = await gateway.client.get("/v1/workers", headers={"authorization": "Bearer x"})
    status, code, message = error_of(answer)
    assert (status, code) == (500, "INTERNAL")
    assert "api_tokens" not in message


async def test_orbit_dev_keeps_its_token_and_revokes_the_ones_it_replaces(
    orbit_env: OrbitEnv, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ORBIT_CREDENTIALS", str(tmp_path / "credentials.json"))
    settings = orbit_env.settings_with(auth="tokens")
    said: list[str] = []
    first = await dev_token(settings, said.append)
    assert first is not None
    assert saved_token(settings.gateway_url) == first
    assert await dev_token(settings, said.append) == first  # kept while it is accepted
    (tmp_path / "credentials.json").unlink()  # the saved secret is lost
    second = await dev_token(settings, said.append)
    assert second not in (None, first)
    async with running(orbit_env, settings) as gateway:
        rows = {row.name: row for row in await gateway.store.tokens.list()}
        assert rows["dev"].revoked_at is not None
        assert [row.revoked_at for name, row in rows.items() if name != "dev"] == [None]
        assert await gateway.store.tokens.grant(first) is None


async def test_no_cors_header_unless_an_origin_is_configured(orbit_env: OrbitEnv) -> None:
    preflight = {
        "origin": "https://console.example",
        "access-control-request-method": "POST",
        "access-control-request-headers": "authorization, content-type",
    }
    async with running(orbit_env, orbit_env.settings_with(auth="tokens")) as gateway:
        answer = await gateway.client.options("/v1/executions", headers=preflight)
        assert "access-control-allow-origin" not in answer.headers
        assert error_of(answer)[:2] == (401, "UNAUTHENTICATED")
    configured = orbit_env.settings_with(
        auth="tokens", http_cors_origins="https://console.example/"
    )
    async with running(orbit_env, configured) as gateway:
        allowed = await gateway.client.options("/v1/executions", headers=preflight)
        assert allowed.headers["access-control-allow-origin"] == "https://console.example"
        other = {**preflight, "origin": "https://evil.example"}
        refused = await gateway.client.options("/v1/executions", headers=other)
        assert "access-control-allow-origin" not in refused.headers
