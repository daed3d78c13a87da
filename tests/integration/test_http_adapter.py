"""The HTTP adapter against a real HTTP server on 127.0.0.1 (no test reaches the internet).

The loopback server is reachable only because these tests allow it
(``ORBIT_HTTP_ALLOW_HOSTS=127.0.0.1``); with the allow-list empty the same
requests are refused, which is the point of the guard.
"""

from __future__ import annotations

import asyncio
import gzip
import json
import socket
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest
from aiohttp import web

from orbit_sdk.tasks import TaskContext
from orbit_services.http_adapter.adapter import (
    HTTP_CONNECTION_ERROR,
    HTTP_RESPONSE_TOO_LARGE,
    HTTP_TIMEOUT,
    HTTP_TOO_MANY_REDIRECTS,
    HttpAdapter,
)
from orbit_services.http_adapter.guard import HTTP_DESTINATION_FORBIDDEN, HttpStepError
from orbit_services.http_adapter.service import HttpAdapterService, http_task

from .conftest import OrbitEnv
from .eventually import eventually

seen: list[dict[str, Any]] = []
"""What the server received, newest last."""


async def _record(request: web.Request) -> dict[str, Any]:
    body = await request.read()
    received = {
        "method": request.method,
        "path": request.path_qs,
        "headers": dict(request.headers),
        "body": body.decode(),
    }
    seen.append(received)
    return received


async def json_reply(request: web.Request) -> web.Response:
    return web.json_response({"hello": "world", "n": [1, 2.5, None]})


async def text_reply(request: web.Request) -> web.Response:
    return web.Response(text="plain words", headers={"X-Trace": "t-1"})


async def echo(request: web.Request) -> web.Response:
    received = await _record(request)
    return web.json_response(received, status=201)


async def slow(request: web.Request) -> web.Response:
    await asyncio.sleep(5)
    return web.Response(text="too late")


async def drip(request: web.Request) -> web.StreamResponse:
    # Headers at once, then a byte now and then: only a total timeout ends it.
    response = web.StreamResponse()
    await response.prepare(request)
    for _ in range(100):
        await response.write(b".")
        await asyncio.sleep(0.05)
    return response


async def big(request: web.Request) -> web.StreamResponse:
    size = int(request.query.get("size", "5000"))
    if "chunked" in request.query:
        response = web.StreamResponse()
        response.enable_chunked_encoding()
        await response.prepare(request)
        for _ in range(size // 100):
            await response.write(b"x" * 100)
        return response
    return web.Response(body=b"x" * size)


async def bomb(request: web.Request) -> web.Response:
    # 200 kB of zeros, a few hundred bytes on the wire: the cap counts what it decodes to.
    return web.Response(
        body=gzip.compress(b"0" * 200_000),
        headers={"Content-Encoding": "gzip", "Content-Type": "text/plain"},
    )


async def hops(request: web.Request) -> web.Response:
    left = int(request.match_info["left"])
    if left == 0:
        return web.json_response({"arrived": True})
    raise web.HTTPFound(f"/hops/{left - 1}")


async def redirect(request: web.Request) -> web.Response:
    await _record(request)
    status = int(request.query.get("status", "302"))
    return web.Response(status=status, headers={"Location": request.query["to"]})


async def status(request: web.Request) -> web.Response:
    code = int(request.match_info["code"])
    return web.Response(status=code, text=f"nope, {code}\n" + "detail " * 200)


WEIRD = {
    # kind: (content type, body, what the step's output body is)
    "not-json": ("application/json", b"{nope", "{nope"),
    "nan": ("application/json", b"[NaN]", "[NaN]"),
    "empty-json": ("application/problem+json", b"", None),
    "vendor-json": ("application/vnd.api+json", b'{"a": 1}', {"a": 1}),
    "nul-json": ("application/json", b'["a\\u0000b"]', '["a\\u0000b"]'),
    "nul-text": ("text/plain", b"a\x00b", "a\ufffdb"),
    "latin-1": ("text/plain; charset=iso-8859-1", "café".encode("latin-1"), "café"),
}


async def weird(request: web.Request) -> web.Response:
    content_type, body, _ = WEIRD[request.match_info["kind"]]
    return web.Response(body=body, headers={"Content-Type": content_type})


async def cookie(request: web.Request) -> web.Response:
    response = web.json_response({"cookie": request.headers.get("Cookie")})
    response.set_cookie("session", "s3cret")
    return response


def _app() -> web.Application:
    app = web.Application()
    app.router.add_get("/json", json_reply)
    app.router.add_get("/text", text_reply)
    app.router.add_route("*", "/echo", echo)
    app.router.add_get("/slow", slow)
    app.router.add_get("/drip", drip)
    app.router.add_get("/big", big)
    app.router.add_get("/bomb", bomb)
    app.router.add_get("/hops/{left}", hops)
    app.router.add_route("*", "/redirect", redirect)
    app.router.add_get("/status/{code}", status)
    app.router.add_get("/cookie", cookie)
    app.router.add_get("/weird/{kind}", weird)
    return app


@pytest.fixture
async def server() -> AsyncIterator[str]:
    """The base URL of the test server."""
    seen.clear()
    # Handlers stop when the adapter hangs up (a timeout), so teardown does not wait.
    runner = web.AppRunner(_app(), handler_cancellation=True, shutdown_timeout=0.5)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    sockets = site._server.sockets if site._server is not None else []  # type: ignore[union-attr]
    port = sockets[0].getsockname()[1]
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        await runner.cleanup()


AdapterFactory = Callable[..., HttpAdapter]


@pytest.fixture
async def make_adapter(orbit_env: OrbitEnv) -> AsyncIterator[AdapterFactory]:
    """Adapters from the test's settings: the allow-list has 127.0.0.1 unless changed."""
    opened: list[HttpAdapter] = []

    def make(**changes: Any) -> HttpAdapter:
        settings = orbit_env.settings_with(**{"http_allow_hosts": "127.0.0.1", **changes})
        adapter = HttpAdapter.from_settings(settings)
        opened.append(adapter)
        return adapter

    yield make
    for adapter in opened:
        await adapter.close()


@pytest.fixture
async def adapter(make_adapter: AdapterFactory) -> HttpAdapter:
    adapter = make_adapter()
    await adapter.open()
    return adapter


async def _failure(adapter: HttpAdapter, request: dict[str, Any]) -> HttpStepError:
    with pytest.raises(HttpStepError) as failed:
        await adapter.request(request)
    return failed.value


# -- answers ---------------------------------------------------------------------


async def test_a_json_answer_is_parsed(adapter: HttpAdapter, server: str) -> None:
    response = await adapter.request({"url": f"{server}/json"})
    assert response.status == 200
    assert response.body == {"hello": "world", "n": [1, 2.5, None]}
    assert response.headers["content-type"] == "application/json; charset=utf-8"


async def test_a_text_answer_is_text(adapter: HttpAdapter, server: str) -> None:
    response = await adapter.request({"method": "GET", "url": f"{server}/text"})
    assert (response.status, response.body) == (200, "plain words")
    assert response.headers["x-trace"] == "t-1"  # names in lower case


async def test_a_head_request_has_an_empty_body(adapter: HttpAdapter, server: str) -> None:
    response = await adapter.request({"method": "HEAD", "url": f"{server}/text"})
    assert (response.status, response.body) == (200, "")


async def test_the_json_body_and_headers_arrive(adapter: HttpAdapter, server: str) -> None:
    response = await adapter.request(
        {
            "method": "POST",
            "url": f"{server}/echo?x=1",
            "headers": {"X-Order": "o-1", "X-Count": 3, "X-Flag": True, "X-None": None},
            "body": {"order": "o-1", "items": [{"sku": "tea"}], "note": "café"},
        }
    )
    assert response.status == 201
    assert isinstance(response.body, dict)
    received = response.body
    assert received["method"] == "POST"
    assert received["path"] == "/echo?x=1"
    headers = received["headers"]
    assert isinstance(headers, dict)
    assert headers["X-Order"] == "o-1"
    assert (headers["X-Count"], headers["X-Flag"]) == ("3", "true")
    assert "X-None" not in headers
    assert headers["Content-Type"] == "application/json"
    assert headers["User-Agent"].startswith("orbit-http-adapter/")
    assert isinstance(received["body"], str)
    assert json.loads(received["body"]) == {
        "order": "o-1",
        "items": [{"sku": "tea"}],
        "note": "café",
    }


async def test_a_string_body_is_sent_as_text(adapter: HttpAdapter, server: str) -> None:
    await adapter.request({"method": "PUT", "url": f"{server}/echo", "body": "just words"})
    await adapter.request(
        {
            "method": "POST",
            "url": f"{server}/echo",
            "headers": {"content-type": "application/x-www-form-urlencoded"},
            "body": "a=1&b=2",
        }
    )
    text, form = seen
    assert (text["body"], text["headers"]["Content-Type"]) == (
        "just words",
        "text/plain; charset=utf-8",
    )
    assert (form["body"], form["headers"]["Content-Type"]) == (
        "a=1&b=2",
        "application/x-www-form-urlencoded",
    )


@pytest.mark.parametrize("kind", sorted(WEIRD))
async def test_bodies_become_storable_json_or_text(
    adapter: HttpAdapter, server: str, kind: str
) -> None:
    response = await adapter.request({"url": f"{server}/weird/{kind}"})
    assert response.body == WEIRD[kind][2]


async def test_cookies_are_not_kept_between_requests(adapter: HttpAdapter, server: str) -> None:
    first = await adapter.request({"url": f"{server}/cookie"})
    assert "session=s3cret" in first.headers["set-cookie"]
    second = await adapter.request({"url": f"{server}/cookie"})
    assert second.body == {"cookie": None}


async def test_a_bad_header_is_refused_before_sending(adapter: HttpAdapter, server: str) -> None:
    failure = await _failure(
        adapter, {"url": f"{server}/echo", "headers": {"X-Evil": "a\r\nX-Injected: 1"}}
    )
    assert (failure.code, failure.retryable) == ("INVALID_INPUT", False)
    assert seen == []


# -- time and size -----------------------------------------------------------------


async def test_a_slow_server_times_out(adapter: HttpAdapter, server: str) -> None:
    # The server answers after 5 s: a timeout, not its answer, says the bound held.
    failure = await _failure(adapter, {"url": f"{server}/slow", "timeout_ms": 300})
    assert (failure.code, failure.retryable) == (HTTP_TIMEOUT, True)
    assert "within 300 ms" in failure.message


async def test_a_slow_drip_is_bounded_by_the_total_timeout(
    adapter: HttpAdapter, server: str
) -> None:
    # The drip ends after 5 s with a byte every 50 ms: only a total timeout stops it sooner.
    failure = await _failure(adapter, {"url": f"{server}/drip", "timeout_ms": 400})
    assert failure.code == HTTP_TIMEOUT


async def test_the_default_timeout_applies(make_adapter: AdapterFactory, server: str) -> None:
    adapter = make_adapter(http_default_timeout_ms=300)
    await adapter.open()
    failure = await _failure(adapter, {"url": f"{server}/slow"})
    assert failure.code == HTTP_TIMEOUT


@pytest.mark.parametrize("query", ["size=5000", "size=5000&chunked=1"])
async def test_a_body_over_the_cap_fails(
    make_adapter: AdapterFactory, server: str, query: str
) -> None:
    adapter = make_adapter(http_max_response_bytes=1000)
    await adapter.open()
    failure = await _failure(adapter, {"url": f"{server}/big?{query}"})
    assert (failure.code, failure.retryable) == (HTTP_RESPONSE_TOO_LARGE, False)
    assert "ORBIT_HTTP_MAX_RESPONSE_BYTES" in failure.message
    within = await adapter.request({"url": f"{server}/big?size=1000"})
    assert within.body == "x" * 1000


async def test_the_cap_counts_the_decoded_body(make_adapter: AdapterFactory, server: str) -> None:
    adapter = make_adapter(http_max_response_bytes=100_000)
    await adapter.open()
    failure = await _failure(adapter, {"url": f"{server}/bomb"})
    assert failure.code == HTTP_RESPONSE_TOO_LARGE


# -- redirects ---------------------------------------------------------------------


async def test_a_redirect_chain_within_the_limit_is_followed(
    make_adapter: AdapterFactory, server: str
) -> None:
    adapter = make_adapter(http_max_redirects=3)
    await adapter.open()
    response = await adapter.request({"url": f"{server}/hops/3"})
    assert response.body == {"arrived": True}
    failure = await _failure(adapter, {"url": f"{server}/hops/4"})
    assert (failure.code, failure.retryable) == (HTTP_TOO_MANY_REDIRECTS, False)
    assert "more than 3 times" in failure.message


async def test_no_redirects_are_followed_at_zero(make_adapter: AdapterFactory, server: str) -> None:
    adapter = make_adapter(http_max_redirects=0)
    await adapter.open()
    failure = await _failure(adapter, {"url": f"{server}/hops/1"})
    assert failure.code == HTTP_TOO_MANY_REDIRECTS


@pytest.mark.parametrize(
    ("status", "method", "then"),
    [
        (301, "POST", "GET"),
        (302, "POST", "GET"),
        (303, "POST", "GET"),
        (303, "PUT", "GET"),
        (302, "PUT", "PUT"),
        (307, "POST", "POST"),
        (308, "PATCH", "PATCH"),
    ],
)
async def test_redirects_keep_or_change_the_method_as_browsers_do(
    adapter: HttpAdapter, server: str, status: int, method: str, then: str
) -> None:
    response = await adapter.request(
        {
            "method": method,
            "url": f"{server}/redirect?status={status}&to=/echo",
            "headers": {"Authorization": "Bearer t"},
            "body": {"n": 1},
        }
    )
    _, arrived = seen
    assert response.body == arrived
    assert arrived["method"] == then
    if then == "GET":
        assert arrived["body"] == ""
        assert "Content-Type" not in arrived["headers"]
    else:
        assert json.loads(arrived["body"]) == {"n": 1}
    assert arrived["headers"]["Authorization"] == "Bearer t"  # the same origin


async def test_credentials_stay_with_their_origin(
    make_adapter: AdapterFactory, server: str
) -> None:
    # The same server under another name is another origin.
    adapter = make_adapter(http_allow_hosts="127.0.0.1,localhost")
    await adapter.open()
    other = server.replace("127.0.0.1", "localhost")
    await adapter.request(
        {
            "url": f"{server}/redirect?status=307&to={other}/echo",
            "headers": {"Authorization": "Bearer t", "Cookie": "a=1", "X-Keep": "yes"},
        }
    )
    _, arrived = seen
    assert "Authorization" not in arrived["headers"]
    assert "Cookie" not in arrived["headers"]
    assert arrived["headers"]["X-Keep"] == "yes"


@pytest.mark.parametrize(
    "target",
    [
        "http://169.254.169.254/latest/meta-data/",
        "http://10.0.0.1/",
        "http://[::1]/",
        "http://localhost/",
        "http://0x7f000002/",  # 127.0.0.2: loopback, but not the allowed 127.0.0.1
        "file:///etc/passwd",
    ],
)
async def test_a_redirect_to_a_forbidden_address_is_refused(
    adapter: HttpAdapter, server: str, target: str
) -> None:
    failure = await _failure(adapter, {"url": f"{server}/redirect?to={target}"})
    assert failure.retryable is False
    assert failure.code in (HTTP_DESTINATION_FORBIDDEN, "HTTP_INVALID_URL")
    assert len(seen) == 1  # the redirect itself, nothing after it


# -- statuses ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("code", "retryable"),
    [(400, False), (401, False), (404, False), (409, False), (429, True), (500, True), (503, True)],
)
async def test_statuses_become_codes_with_their_retryable_flag(
    adapter: HttpAdapter, server: str, code: int, retryable: bool
) -> None:
    failure = await _failure(adapter, {"url": f"{server}/status/{code}?token=secret"})
    assert (failure.code, failure.retryable) == (f"HTTP_{code}", retryable)
    assert f"answered {code}" in failure.message
    assert f"nope, {code}" in failure.message
    assert "secret" not in failure.message  # the query string is left out
    assert isinstance(failure.details, dict)
    assert failure.details["status"] == code
    body = failure.details["body"]
    assert isinstance(body, str)
    assert body.startswith(f"nope, {code}")
    assert len(body) <= 500


# -- the guard -----------------------------------------------------------------------


async def test_without_the_allow_list_the_loopback_server_is_refused(
    make_adapter: AdapterFactory, server: str
) -> None:
    adapter = make_adapter(http_allow_hosts="")
    await adapter.open()
    for url in (f"{server}/json", server.replace("127.0.0.1", "localhost") + "/json"):
        failure = await _failure(adapter, {"url": url})
        assert (failure.code, failure.retryable) == (HTTP_DESTINATION_FORBIDDEN, False)
    assert seen == []


def _resolving(loop: asyncio.AbstractEventLoop, names: dict[str, list[str]]) -> Callable[..., Any]:
    real = loop.getaddrinfo

    async def getaddrinfo(host: Any, port: Any, *args: Any, **kwargs: Any) -> Any:
        if host in names:
            return [
                (socket.AF_INET, socket.SOCK_STREAM, 6, "", (address, port))
                for address in names[host]
            ]
        return await real(host, port, *args, **kwargs)

    return getaddrinfo


async def test_names_are_judged_by_the_addresses_they_resolve_to(
    make_adapter: AdapterFactory, server: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    loop = asyncio.get_running_loop()
    names = {"inside.test": ["127.0.0.1"], "mixed.test": ["93.184.216.34", "10.0.0.7"]}
    monkeypatch.setattr(loop, "getaddrinfo", _resolving(loop, names))
    port = server.rsplit(":", 1)[1]

    allowed = make_adapter()
    await allowed.open()
    # The adapter connects to the address it checked, whatever the name is.
    response = await allowed.request({"url": f"http://inside.test:{port}/json"})
    assert response.body == {"hello": "world", "n": [1, 2.5, None]}

    strict = make_adapter(http_allow_hosts="")
    await strict.open()
    failure = await _failure(strict, {"url": f"http://inside.test:{port}/json"})
    assert failure.code == HTTP_DESTINATION_FORBIDDEN
    assert "inside.test (127.0.0.1): a loopback address" in failure.message
    # One private address among public ones is enough to refuse the name.
    failure = await _failure(strict, {"url": f"http://mixed.test:{port}/json"})
    assert failure.code == HTTP_DESTINATION_FORBIDDEN
    assert "mixed.test (10.0.0.7): a private address" in failure.message


async def test_a_name_that_does_not_resolve_is_a_connection_error(adapter: HttpAdapter) -> None:
    failure = await _failure(adapter, {"url": "http://no-such-host.invalid/"})
    assert (failure.code, failure.retryable) == (HTTP_CONNECTION_ERROR, True)


async def test_a_refused_connection_is_retryable(adapter: HttpAdapter) -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    failure = await _failure(adapter, {"url": f"http://127.0.0.1:{port}/"})
    assert (failure.code, failure.retryable) == (HTTP_CONNECTION_ERROR, True)


# -- the task the service serves -------------------------------------------------------


async def test_the_task_reports_outputs_and_coded_failures(
    adapter: HttpAdapter, server: str
) -> None:
    task = http_task(adapter, heartbeat_s=0.05)
    assert (task.name, task.version) == ("orbit.http.request", "1")
    beats = 0

    async def heartbeat() -> None:
        nonlocal beats
        beats += 1

    ctx = TaskContext(_send_heartbeat=heartbeat)
    done = await task.run({"method": "GET", "url": f"{server}/json"}, ctx)
    assert done.error is None
    assert isinstance(done.output, dict)
    assert (done.output["status"], done.output["body"]) == (
        200,
        {"hello": "world", "n": [1, 2.5, None]},
    )

    failed = await task.run({"url": f"{server}/status/503"}, ctx)
    assert failed.error is not None
    assert (failed.error.code, failed.error.retryable) == ("HTTP_503", True)

    bad = await task.run({"method": "GET"}, ctx)
    assert bad.error is not None
    assert (bad.error.code, bad.error.retryable) == ("INVALID_INPUT", False)

    # A long request heartbeats, and stops when the engine asks.
    slow = asyncio.ensure_future(task.run({"url": f"{server}/slow", "timeout_ms": 4000}, ctx))

    async def counted() -> int:
        return beats

    await eventually(counted, lambda n: n >= 2, what="two heartbeats")
    ctx.cancelled.set()
    # Stopped by the cancel, not by its 4 s timeout: the code says which.
    stopped = await asyncio.wait_for(slow, 30)
    assert stopped.error is not None
    assert (stopped.error.code, stopped.error.retryable) == ("CANCELLED", False)


async def test_the_service_stays_idle_while_the_adapter_is_disabled(orbit_env: OrbitEnv) -> None:
    service = HttpAdapterService(orbit_env.settings_with(http_adapter_enabled=False))
    await service.start()
    assert service.worker is None
    await service.stop()
