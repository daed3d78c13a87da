"""Hostile input: every value that enters the gateway, over HTTP or as an AMQP command,
is checked before anything is stored or published, and the execution goes on.

Against a real Postgres and RabbitMQ, this module proves that:

- a NUL or a lone surrogate in any string of any request (a body field, a key or a value
  of an input or a payload, a path parameter, a query parameter, a definition) is answered
  4xx with an error code, never 5xx, and stores nothing, alone or among valid requests;
- a payload (a start's input, a signal's payload) nested 63 or 64 deep is taken and can be
  read back, one nested 65 deep is refused 400 ``INVALID_REQUEST``, and so is one past
  what the JSON decoders read (300); the depth is the value's own, counted as
  :mod:`orbit_model.payloads` counts it (``[[1]]`` is 2 deep);
- a body of exactly the HTTP limit is read, one byte more is refused 413 before it is
  read, whether it says its length or is streamed without one, on every route; a payload
  of exactly ``ORBIT_MAX_PAYLOAD_BYTES`` (compact JSON) and a definition of exactly
  ``ORBIT_MAX_DEFINITION_BYTES`` are taken, one byte more refused 413; a body without a
  token (to the console's sign-in) is read up to what a sign-in needs, and refused 413
  one byte past it;
- a body nested 100,000 deep is refused 400 at every route that takes a body;
- the same through AMQP commands: refused in the reply with a 4xx code and acked, nothing
  stored; only a body that is not a command at all (100,000 deep) is parked;
- after all of it, the execution's view answers, it is still running, and a valid signal
  is still recorded.

A lone surrogate cannot be sent as UTF-8: in a JSON body it is the escape ``\\ud800``, in
a URL the percent-encoded bytes ``%ED%A0%80`` (its CESU-8 / WTF-8 form).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from dataclasses import dataclass, field, replace
from typing import Any

import httpx
import pytest

from orbit_model import compile_definition
from orbit_model.errors import ErrorCode
from orbit_model.messages import CancelExecution, CommandReply, SignalExecution
from orbit_model.parked import Death, notice_for
from orbit_sdk.amqp import Publisher, connect, open_channel
from orbit_services.gateway import GatewayService
from orbit_services.gateway.edge.guard import ANONYMOUS_BODY_BYTES, ENVELOPE_BYTES

from .conftest import OrbitEnv
from .test_gateway import (
    JSON,
    ORDER,
    YAML,
    Gateway,
    _free_port,
    _next_message,
    ask_command,
    error_of,
    example,
    running,
)

NUL = "\x00"
SURROGATE = "\ud800"
HOSTILE = {"NUL": NUL, "lone surrogate": SURROGATE}
IN_URL = {NUL: "%00", SURROGATE: "%ED%A0%80"}
"""How each is written in a URL: percent-encoded bytes (U+D800 as CESU-8 / WTF-8)."""

APPROVAL = "approval"
"""The signal of order-fulfilment: ``{"approved": bool}``, other keys allowed."""
TOKEN = {"name": "reader", "scopes": ["executions:read"]}


@pytest.fixture
async def gateway(orbit_env: OrbitEnv) -> AsyncIterator[Gateway]:
    async with running(orbit_env, orbit_env.settings) as found:
        yield found


def raw_json(value: Any) -> bytes:
    """``value`` as JSON text; NUL and lone surrogates become ``\\u0000`` and ``\\ud800``."""
    return json.dumps(value, ensure_ascii=True).encode("ascii")


def compact_size(value: Any) -> int:
    """Bytes of the compact JSON of ``value``: what ``ORBIT_MAX_PAYLOAD_BYTES`` counts."""
    return len(json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode())


def nested(depth: int) -> Any:
    """A value ``depth`` deep: ``[[…[0]…]]`` (0: the scalar)."""
    value: Any = 0
    for _ in range(depth):
        value = [value]
    return value


def nested_text(depth: int) -> bytes:
    """``depth`` nested arrays as JSON text, without building them in Python."""
    return b"[" * depth + b"]" * depth


def padded(body: bytes, size: int) -> bytes:
    """``body`` with spaces after it (still the same JSON, or YAML) up to ``size`` bytes."""
    assert len(body) <= size, (len(body), size)
    return body + b" " * (size - len(body))


async def streamed(body: bytes) -> AsyncIterator[bytes]:
    """``body`` in chunks, so that it is sent without a Content-Length."""
    for start in range(0, len(body), 4096):
        yield body[start : start + 4096]


@dataclass(frozen=True)
class Probe:
    """One hostile request: what it tries, and how it is sent."""

    what: str
    method: str
    url: str
    """Path and query, percent-encoded as they go on the wire."""
    body: bytes | None = None
    headers: dict[str, str] = field(default_factory=lambda: dict(JSON))

    async def send(self, client: httpx.AsyncClient) -> httpx.Response:
        return await client.request(self.method, self.url, content=self.body, headers=self.headers)


def refusal_problem(response: httpx.Response) -> str | None:
    """What is wrong with ``response`` as the refusal of a hostile request, or None: it
    must be a 4xx with ``{"error": {"code", "message"}}``, its code one of Orbit's."""
    if not 400 <= response.status_code < 500:
        return f"answered {response.status_code}: {response.text[:300]}"
    try:
        error = response.json()["error"]
        code, message = error["code"], error["message"]
    except (ValueError, KeyError, TypeError):
        return f"answered {response.status_code} without an error body: {response.text[:300]}"
    if code not in ErrorCode.__members__ or not isinstance(message, str) or not message:
        return f"answered {response.status_code} with code {code!r}: {message!r}"
    if "Traceback" in response.text:
        return "answered with a traceback"
    return None


# -- the table of hostile strings ------------------------------------------------------


def path_probes(order: str, bad: str) -> list[Probe]:
    """``bad`` in every path parameter and query parameter."""
    word = f"a{IN_URL[bad]}b"
    execution = f"/v1/executions/{order}"
    approval = raw_json({"approved": True})
    return [
        Probe("definition name", "GET", f"/v1/definitions/{word}/1.0.0"),
        Probe("definition version", "GET", f"/v1/definitions/order-fulfilment/1.0{word}"),
        Probe("view id", "GET", f"/v1/executions/{word}"),
        Probe("history id", "GET", f"/v1/executions/{word}/history"),
        Probe("query id", "GET", f"/v1/executions/{word}/queries/stage"),
        Probe("query name", "GET", f"{execution}/queries/{word}"),
        Probe("cancel id", "POST", f"/v1/executions/{word}/cancel", raw_json({"reason": "r"})),
        Probe("signal id", "POST", f"/v1/executions/{word}/signals/{APPROVAL}", approval),
        Probe("signal name", "POST", f"{execution}/signals/{word}", approval),
        Probe(
            "signal request_id",
            "POST",
            f"{execution}/signals/{APPROVAL}?request_id={word}",
            approval,
        ),
        Probe("revoke name", "POST", f"/v1/tokens/{word}/revoke"),
        Probe("list status", "GET", f"/v1/executions?status={word}"),
        Probe("list workflow", "GET", f"/v1/executions?workflow={word}"),
        Probe("list cursor", "GET", f"/v1/executions?cursor={word}"),
        Probe("list limit", "GET", f"/v1/executions?limit=1{word}"),
        Probe("view wait", "GET", f"{execution}?wait=0{word}"),
    ]


def body_probes(order: str, bad: str) -> list[Probe]:
    """``bad`` in every string field of every JSON body, and in its keys and values."""
    word = f"a{bad}b"
    start = {"workflow": "order-fulfilment", "execution_id": "hostile", "input": ORDER}
    execution = f"/v1/executions/{order}"
    bodies: list[tuple[str, str, Any]] = [
        ("start workflow", "/v1/executions", {**start, "workflow": word}),
        ("start version", "/v1/executions", {**start, "version": word}),
        ("start execution_id", "/v1/executions", {**start, "execution_id": word}),
        ("start input value", "/v1/executions", {**start, "input": {**ORDER, "order_id": word}}),
        ("start input key", "/v1/executions", {**start, "input": {**ORDER, word: 1}}),
        (
            "start input value deep inside",
            "/v1/executions",
            {**start, "input": {**ORDER, "items": [{"sku": ["x", {"y": word}]}]}},
        ),
        ("start unknown field", "/v1/executions", {**start, word: 1}),
        ("signal payload value", f"{execution}/signals/{APPROVAL}", {"approved": True, "n": word}),
        ("signal payload key", f"{execution}/signals/{APPROVAL}", {"approved": True, word: 1}),
        ("signal payload string", f"{execution}/signals/{APPROVAL}", word),
        (
            "signal payload in a list",
            f"{execution}/signals/{APPROVAL}",
            {"approved": True, "notes": ["ok", word]},
        ),
        ("cancel reason", f"{execution}/cancel", {"reason": word}),
        ("cancel unknown field", f"{execution}/cancel", {word: "r"}),
        ("token name", "/v1/tokens", {**TOKEN, "name": word}),
        ("token scope", "/v1/tokens", {**TOKEN, "scopes": [word]}),
        ("token workflow", "/v1/tokens", {**TOKEN, "workflows": [word]}),
        ("token expires_in", "/v1/tokens", {**TOKEN, "expires_in": f"1{bad}d"}),
    ]
    return [Probe(what, "POST", url, raw_json(body)) for what, url, body in bodies]


def definition_probes(bad: str) -> list[Probe]:
    """``bad`` in a definition: raw in YAML, as a YAML escape, and in compiled IR (JSON)."""
    yaml = example("hello-world")
    line = "description: Greets whoever it is given."
    escape = r"\0" if bad == NUL else r"\ud800"
    ir = compile_definition(yaml).ir.to_json_data()
    schema = {"type": "object", "properties": {"name": {"type": "string", "default": bad}}}
    texts = {
        "YAML description, raw": yaml.replace(line, f"description: a{bad}b"),
        "YAML description, escaped": yaml.replace(line, f'description: "a{escape}b"'),
        "YAML workflow name, escaped": yaml.replace(
            "workflow: hello-world", f'workflow: "hello{escape}"'
        ),
        "YAML schema default, escaped": yaml.replace("default: world", f'default: "a{escape}"'),
    }
    probes = [
        Probe(what, "POST", "/v1/definitions", text.encode("utf-8", "surrogatepass"), dict(YAML))
        for what, text in texts.items()
    ]
    irs = {
        "IR name": {**ir, "name": f"hello{bad}"},
        "IR description": {**ir, "description": f"a{bad}b"},
        "IR input schema": {**ir, "input_schema": schema},
    }
    probes += [Probe(what, "POST", "/v1/definitions", raw_json(body)) for what, body in irs.items()]
    return probes


def hostile_probes(order: str) -> list[Probe]:
    """Every probe, with a NUL and with a lone surrogate."""
    return [
        replace(probe, what=f"{name} in {probe.what}")
        for name, bad in HOSTILE.items()
        for probe in (*path_probes(order, bad), *body_probes(order, bad), *definition_probes(bad))
    ]


async def stored(gateway: Gateway, order: str) -> dict[str, Any]:
    """What the store holds that a hostile request could have added to."""
    executions = (await gateway.client.get("/v1/executions")).json()["items"]
    return {
        "events": len(await gateway.store.read_events(order)),
        "executions": sorted(item["execution_id"] for item in executions),
        "definitions": sorted((d.name, d.version) for d in await gateway.store.list_definitions()),
        "tokens": [row.name for row in await gateway.store.tokens.list()],
    }


async def assert_goes_on(gateway: Gateway, order: str) -> None:
    """The execution answers, is running, and still takes a valid signal."""
    view = await gateway.client.get(f"/v1/executions/{order}")
    assert view.status_code == 200, view.text
    assert view.json()["status"] == "running"
    before = len(await gateway.store.read_events(order))
    signal = await gateway.client.post(
        f"/v1/executions/{order}/signals/{APPROVAL}", json={"approved": True}
    )
    assert (signal.status_code, signal.json()["seq"]) == (202, before + 1)


async def deployed_order(gateway: Gateway) -> str:
    await gateway.deploy("send-invoice", "order-fulfilment")
    return await gateway.start("order-fulfilment", input=ORDER)


# -- 1. NUL and lone surrogates everywhere ---------------------------------------------


async def test_a_nul_or_a_lone_surrogate_anywhere_is_refused_and_stores_nothing(
    gateway: Gateway,
) -> None:
    order = await deployed_order(gateway)
    before = await stored(gateway, order)
    probes = hostile_probes(order)
    assert len({probe.what for probe in probes}) == len(probes) >= 2 * 40
    wrong = {}
    for probe in probes:
        problem = refusal_problem(await probe.send(gateway.client))
        if problem is not None:
            wrong[probe.what] = problem
    assert wrong == {}
    assert await stored(gateway, order) == before
    await assert_goes_on(gateway, order)


# -- 2. depth 63, 64, 65 ---------------------------------------------------------------

DEEPER_THAN_THE_DECODERS = 300
"""Past what pydantic reads (about 200 levels): refused all the same, with a code."""


async def test_a_payload_may_nest_64_deep_and_no_deeper(gateway: Gateway) -> None:
    order = await deployed_order(gateway)
    signal = f"/v1/executions/{order}/signals/{APPROVAL}"
    for depth in (63, 64, 65, DEEPER_THAN_THE_DECODERS):
        # The depth of the value itself: its object is one level, the arrays in it the rest.
        start_input = {**ORDER, "deep": nested(depth - 1)}
        payload = {"approved": True, "deep": nested(depth - 1)}
        body = {"workflow": "order-fulfilment", "execution_id": f"deep-{depth}"}
        started = await gateway.client.post("/v1/executions", json={**body, "input": start_input})
        signalled = await gateway.client.post(signal, json=payload)
        if depth > 64:
            for answer in (started, signalled):
                status, code, message = error_of(answer)
                assert (status, code) == (400, "INVALID_REQUEST"), (depth, message)
                if depth == 65:
                    assert "nested deeper than 64 levels" in message
            missing = await gateway.client.get(f"/v1/executions/deep-{depth}")
            assert error_of(missing)[:2] == (404, "NOT_FOUND")
            continue
        assert started.status_code == 201, (depth, started.text)
        assert signalled.status_code == 202, (depth, signalled.text)
        # Stored, and read back whole: the view and the history answer.
        view = await gateway.client.get(f"/v1/executions/deep-{depth}")
        assert view.status_code == 200, view.text
        assert view.json()["input"]["deep"] == nested(depth - 1)
        history = await gateway.client.get(f"/v1/executions/{order}/history")
        assert history.json()[-1]["data"]["payload"] == payload
    events = [entry.event.type for entry in await gateway.store.read_events(order)]
    assert events == ["WorkflowCreated", "SignalReceived", "SignalReceived"]
    listed = (await gateway.client.get("/v1/executions")).json()["items"]
    assert sorted(item["execution_id"] for item in listed) == sorted([order, "deep-63", "deep-64"])
    await assert_goes_on(gateway, order)


# -- 3. the size limits ----------------------------------------------------------------

PAYLOAD_LIMIT = 1000
DEFINITION_LIMIT = 20_000
BODY_LIMIT = max(PAYLOAD_LIMIT + ENVELOPE_BYTES, DEFINITION_LIMIT)
"""What the gateway reads of a body with these settings (see ``gateway.app``)."""
OVER_THE_BODY_LIMIT = (
    f"the request body is over {BODY_LIMIT} bytes"
    " (ORBIT_MAX_PAYLOAD_BYTES or ORBIT_MAX_DEFINITION_BYTES)"
)


async def test_a_body_one_byte_over_the_limit_is_refused_before_it_is_read(
    orbit_env: OrbitEnv,
) -> None:
    settings = orbit_env.settings_with(
        max_payload_bytes=PAYLOAD_LIMIT, max_definition_bytes=DEFINITION_LIMIT
    )
    async with running(orbit_env, settings) as gateway:
        order = await deployed_order(gateway)
        other = await gateway.start("order-fulfilment", input=ORDER)
        before = await stored(gateway, order)
        routes = {
            "definitions": ("/v1/definitions", example("hello-world").encode(), YAML),
            "start": ("/v1/executions", raw_json({"workflow": "order-fulfilment"}), JSON),
            "signal": (f"/v1/executions/{order}/signals/{APPROVAL}", b"{}", JSON),
            "cancel": (f"/v1/executions/{order}/cancel", b"{}", JSON),
            "tokens": ("/v1/tokens", raw_json(TOKEN), JSON),
        }
        too_large = (413, "PAYLOAD_TOO_LARGE", OVER_THE_BODY_LIMIT)
        wrong = {}
        for route, (url, body, headers) in routes.items():
            over = padded(body, BODY_LIMIT + 1)
            for how, content in (("with its length", over), ("streamed", streamed(over))):
                answer = await gateway.client.post(url, content=content, headers=headers)
                if error_of(answer) != too_large:
                    wrong[f"{route} {how}"] = f"{answer.status_code} {answer.text[:200]}"
            # And streamed without a type: refused for that, whatever parses the route's body.
            untyped = await gateway.client.post(url, content=streamed(body))
            if error_of(untyped)[:2] != (415, "UNSUPPORTED_MEDIA_TYPE"):
                wrong[f"{route} without a type"] = f"{untyped.status_code} {untyped.text[:200]}"
        assert wrong == {}
        assert await stored(gateway, order) == before

        # Exactly at the limit: read, and then judged on what it holds.
        start = raw_json({"workflow": "order-fulfilment", "execution_id": "at", "input": ORDER})
        signal = raw_json({"approved": True})
        cancel = raw_json({"reason": "at the limit"})
        at_the_limit = {  # the answers with its length, then streamed
            "start": ("/v1/executions", start, (201, 200)),
            "signal": (f"/v1/executions/{order}/signals/{APPROVAL}", signal, (202, 202)),
            "cancel": (f"/v1/executions/{other}/cancel", cancel, (200, 200)),
            "tokens": ("/v1/tokens", raw_json(TOKEN), (201, 409)),
        }
        for route, (url, body, statuses) in at_the_limit.items():
            exact = padded(body, BODY_LIMIT)
            answers = [
                await gateway.client.post(url, content=content, headers=JSON)
                for content in (exact, streamed(exact))
            ]
            assert tuple(a.status_code for a in answers) == statuses, (route, answers[1].text)
        # A definition that size is read, and refused by its own limit (another message).
        definition = padded(example("hello-world").encode(), BODY_LIMIT)
        answer = await gateway.client.post("/v1/definitions", content=definition, headers=YAML)
        status, code, message = error_of(answer)
        assert (status, code) == (413, "PAYLOAD_TOO_LARGE")
        assert f"the limit is {DEFINITION_LIMIT} (ORBIT_MAX_DEFINITION_BYTES)" in message
        assert OVER_THE_BODY_LIMIT not in message
        after = await stored(gateway, order)
        assert after["events"] == before["events"] + 2
        assert "at" in after["executions"]
        assert after["tokens"] == ["reader"]
        assert after["definitions"] == before["definitions"]
        await assert_goes_on(gateway, order)


async def test_a_payload_or_definition_one_byte_over_its_limit_is_refused(
    orbit_env: OrbitEnv,
) -> None:
    settings = orbit_env.settings_with(
        max_payload_bytes=PAYLOAD_LIMIT, max_definition_bytes=DEFINITION_LIMIT
    )
    async with running(orbit_env, settings) as gateway:
        order = await deployed_order(gateway)
        signal = f"/v1/executions/{order}/signals/{APPROVAL}"

        def sized(value: dict[str, Any], size: int) -> dict[str, Any]:
            """``value`` with a ``pad`` string making its compact JSON ``size`` bytes."""
            grown = {**value, "pad": ""}
            grown["pad"] = "x" * (size - compact_size(grown))
            assert compact_size(grown) == size
            return grown

        for size in (PAYLOAD_LIMIT, PAYLOAD_LIMIT + 1):
            start = {
                "workflow": "order-fulfilment",
                "execution_id": f"sized-{size}",
                "input": sized(ORDER, size),
            }
            started = await gateway.client.post("/v1/executions", json=start)
            signalled = await gateway.client.post(signal, json=sized({"approved": True}, size))
            if size == PAYLOAD_LIMIT:
                assert started.status_code == 201, started.text
                assert signalled.status_code == 202, signalled.text
                continue
            for answer, what in ((started, "the execution input"), (signalled, "the payload")):
                status, code, message = error_of(answer)
                assert (status, code) == (413, "PAYLOAD_TOO_LARGE"), message
                assert what in message
                assert f"is {size} bytes; the limit is {PAYLOAD_LIMIT}" in message
        text = example("hello-world").encode()
        for size in (DEFINITION_LIMIT, DEFINITION_LIMIT + 1):
            body = padded(text.replace(b"1.0.0", f"{size}.0.0".encode()), size)
            answer = await gateway.client.post("/v1/definitions", content=body, headers=YAML)
            if size == DEFINITION_LIMIT:
                assert answer.status_code == 201, answer.text
                continue
            status, code, message = error_of(answer)
            assert (status, code) == (413, "PAYLOAD_TOO_LARGE")
            assert f"is {size} bytes; the limit is {DEFINITION_LIMIT}" in message
        after = await stored(gateway, order)
        assert after["events"] == 2
        assert sorted(after["executions"]) == sorted([order, f"sized-{PAYLOAD_LIMIT}"])
        assert ("hello-world", f"{DEFINITION_LIMIT}.0.0") in after["definitions"]
        assert ("hello-world", f"{DEFINITION_LIMIT + 1}.0.0") not in after["definitions"]
        await assert_goes_on(gateway, order)


async def test_a_body_without_a_token_is_refused_past_what_a_sign_in_needs(
    orbit_env: OrbitEnv,
) -> None:
    """The console's sign-in takes a post from anyone: it reads no more than a sign-in
    form needs (it read 2 MiB per connection, before any check)."""
    async with running(orbit_env, orbit_env.settings_with(auth="tokens")) as gateway:
        form = {"content-type": "application/x-www-form-urlencoded"}
        exact = padded(b"token=", ANONYMOUS_BODY_BYTES)
        over = padded(b"token=", ANONYMOUS_BODY_BYTES + 1)
        for content in (over, streamed(over)):
            answer = await gateway.client.post("/ui/login", content=content, headers=form)
            status, code, message = error_of(answer)
            assert (status, code) == (413, "PAYLOAD_TOO_LARGE")
            assert f"over {ANONYMOUS_BODY_BYTES} bytes (without a token" in message
        for content in (exact, streamed(exact)):
            # Read, then judged by the sign-in (without its CSRF token: refused as forged).
            answer = await gateway.client.post("/ui/login", content=content, headers=form)
            assert answer.status_code != 413, answer.text


# -- 4. a body nested 100,000 deep -----------------------------------------------------

DEEP = nested_text(100_000)


async def test_a_body_nested_100000_deep_is_refused_at_every_route(gateway: Gateway) -> None:
    order = await deployed_order(gateway)
    before = await stored(gateway, order)
    execution = f"/v1/executions/{order}"
    probes = [
        ("start", "/v1/executions", DEEP, JSON),
        (
            "start input",
            "/v1/executions",
            b'{"workflow": "order-fulfilment", "input": ' + DEEP + b"}",
            JSON,
        ),
        ("signal", f"{execution}/signals/{APPROVAL}", DEEP, JSON),
        (
            "signal payload field",
            f"{execution}/signals/{APPROVAL}",
            b'{"approved": true, "x": ' + DEEP + b"}",
            JSON,
        ),
        ("cancel", f"{execution}/cancel", DEEP, JSON),
        ("cancel reason", f"{execution}/cancel", b'{"reason": ' + DEEP + b"}", JSON),
        ("tokens", "/v1/tokens", DEEP, JSON),
        ("token scopes", "/v1/tokens", b'{"name": "deep", "scopes": ' + DEEP + b"}", JSON),
        ("definition IR", "/v1/definitions", DEEP, JSON),
        ("definition YAML flow", "/v1/definitions", DEEP, YAML),
        ("definition YAML block", "/v1/definitions", b"- " * 100_000 + b"x\n", YAML),
    ]
    wrong = {}
    for what, url, body, headers in probes:
        answer = await gateway.client.post(url, content=body, headers=headers)
        problem = refusal_problem(answer)
        if problem is None and answer.status_code != 400:
            problem = f"answered {answer.status_code}, not 400: {answer.text[:200]}"
        if problem is not None:
            wrong[what] = problem
    assert wrong == {}
    assert await stored(gateway, order) == before
    await assert_goes_on(gateway, order)


# -- 5. the same through AMQP commands -------------------------------------------------


async def test_commands_get_the_same_checks(orbit_env: OrbitEnv) -> None:
    settings = orbit_env.settings_with(http_port=_free_port())
    topology = orbit_env.topology
    service = GatewayService(settings)
    await service.start()
    try:
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{service.port}") as client:
            for name in ("send-invoice", "order-fulfilment"):
                deployed = await client.post("/v1/definitions", content=example(name), headers=YAML)
                assert deployed.status_code == 201, deployed.text
            started = await client.post(
                "/v1/executions",
                json={"workflow": "order-fulfilment", "execution_id": "order", "input": ORDER},
            )
            assert started.status_code == 201, started.text

            connection = await connect(settings.amqp_url)
            try:
                channel = await open_channel(connection)
                replies = await channel.declare_queue(exclusive=True)
                publisher = Publisher(channel)

                async def ask(body: bytes, correlation_id: str) -> CommandReply:
                    return await ask_command(publisher, topology, replies, body, correlation_id)

                def start(**fields: Any) -> bytes:
                    command = {"type": "StartExecution", "workflow": "order-fulfilment"}
                    return raw_json({**command, "input": ORDER, **fields})

                def signal(payload: Any, name: str = APPROVAL) -> bytes:
                    command = SignalExecution(execution_id="order", name=name, payload=None)
                    return raw_json({**command.model_dump(), "payload": payload})

                refused: dict[str, bytes] = {}
                for label, bad in HOSTILE.items():
                    word = f"a{bad}b"
                    refused |= {
                        f"start, {label} in the workflow": start(workflow=word),
                        f"start, {label} in the version": start(version=word),
                        f"start, {label} in the execution id": start(execution_id=word),
                        f"start, {label} in an input value": start(input={**ORDER, "n": word}),
                        f"start, {label} in an input key": start(input={**ORDER, word: 1}),
                        f"signal, {label} in the payload": signal({"approved": True, "n": word}),
                        f"signal, {label} in a payload key": signal({"approved": True, word: 1}),
                        f"signal, {label} in the name": signal({"approved": True}, name=word),
                        f"cancel, {label} in the reason": raw_json(
                            {**CancelExecution(execution_id="order").model_dump(), "reason": word}
                        ),
                        f"cancel, {label} in the execution id": raw_json(
                            CancelExecution(execution_id="x").model_dump() | {"execution_id": word}
                        ),
                    }
                for depth in (65, DEEPER_THAN_THE_DECODERS):
                    deep_input = {**ORDER, "deep": nested(depth - 1)}
                    deep_payload = {"approved": True, "deep": nested(depth - 1)}
                    refused[f"start, input {depth} deep"] = start(input=deep_input)
                    refused[f"signal, payload {depth} deep"] = signal(deep_payload)
                wrong = {}
                for number, (what, body) in enumerate(refused.items()):
                    reply = await ask(body, f"refused-{number}")
                    code = reply.error.code if reply.error else ""
                    if reply.ok or code not in ErrorCode.__members__:
                        wrong[what] = f"answered {reply.model_dump()}"
                    elif not 400 <= ErrorCode(code).http_status < 500 or (
                        "deep" in what and code != "INVALID_REQUEST"
                    ):
                        wrong[what] = f"answered {code}"
                assert wrong == {}

                # Within the limits, the same commands are carried out.
                deep_64 = start(execution_id="deep-64", input={**ORDER, "deep": nested(63)})
                assert (await ask(deep_64, "ok-1")).ok
                signal_64 = signal({"approved": True, "x": nested(63)})
                taken = (await ask(signal_64, "ok-2")).result
                assert taken is not None
                # "later" or "now": whether the decider has started it yet.
                assert (taken["seq"], taken["steps"]) == (2, ["approval"])

                # Not a command at all: answered, and parked (never retried).
                deep = b'{"type": "StartExecution", "workflow": ' + DEEP + b"}"
                malformed = await ask(deep, "malformed")
                assert not malformed.ok
                assert malformed.error is not None
                assert malformed.error.code == "INVALID_REQUEST"
                parked = await _next_message(await channel.get_queue(topology.dead_letter))
                assert parked.body == deep  # the first one parked: no refusal above was
            finally:
                await connection.close()

            events = (await client.get("/v1/executions/order/history")).json()
            assert [event["type"] for event in events] == ["WorkflowCreated", "SignalReceived"]
            listed = (await client.get("/v1/executions")).json()["items"]
            assert sorted(item["execution_id"] for item in listed) == ["deep-64", "order"]
            view = (await client.get("/v1/executions/order")).json()
            assert view["status"] == "running"
            again = await client.post(
                f"/v1/executions/order/signals/{APPROVAL}", json={"approved": False}
            )
            assert (again.status_code, again.json()["seq"]) == (202, 3)
    finally:
        await service.stop()


async def test_hostile_and_valid_requests_sent_together_are_each_answered(
    gateway: Gateway,
) -> None:
    """Refusals share no fate with valid requests in flight (a signal refused does not fail
    the transaction other signals share), and none of them hangs."""
    order = await deployed_order(gateway)
    hostile = hostile_probes(order)
    valid = [
        gateway.client.post(f"/v1/executions/{order}/signals/{APPROVAL}", json={"approved": True})
        for _ in range(5)
    ]
    answers = await asyncio.wait_for(
        asyncio.gather(*valid, *(probe.send(gateway.client) for probe in hostile)), timeout=10
    )
    accepted, refused = answers[: len(valid)], answers[len(valid) :]
    assert [answer.status_code for answer in accepted] == [202] * len(valid)
    assert sorted(answer.json()["seq"] for answer in accepted) == list(range(2, 2 + len(valid)))
    wrong = {p.what: refusal_problem(a) for p, a in zip(hostile, refused, strict=True)}
    assert {what: problem for what, problem in wrong.items() if problem} == {}
    assert len(await gateway.store.read_events(order)) == 1 + len(valid)
    await assert_goes_on(gateway, order)


# -- refused by Orbit itself, and read safely when parked ----------------------------


async def test_every_refusal_is_orbits_own_before_the_store_is_asked(gateway: Gateway) -> None:
    order = await deployed_order(gateway)
    refused_by_postgres = []
    for probe in hostile_probes(order):
        answer = await probe.send(gateway.client)
        if "Postgres" in error_of(answer)[2]:
            refused_by_postgres.append(probe.what)
    assert refused_by_postgres == []


def test_a_parked_command_too_deep_to_read_concerns_no_execution() -> None:
    body = b'{"type": "SignalExecution", "execution_id": "order", "payload": ' + DEEP + b"}"
    death = Death(queue="ns.commands", reason="rejected")
    assert notice_for(body, death, task_queue=False) is None
