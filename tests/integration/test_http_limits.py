"""The gateway's HTTP connections are bounded before a request reaches the application
(orbit_services.runtime.http_server; docs/operations.md, "HTTP connections").

Against uvicorn serving a small application, with the limits made small, this module
proves that:

- a request line and headers of exactly the limit are served, one byte more is answered
  431 before the rest is sent, with Orbit's error body;
- a request whose head or body does not arrive in time (sent slowly, a byte at a time,
  or not at all) is answered 408 and closed, and a connection that sends nothing is
  closed; an answer slower than those deadlines is still sent, and the connection then
  serves the next request;
- past the connection cap, the connection waiting longest on its client is closed to
  let a new one in, and when every connection is busy with a request the new one is
  answered 503;
- pipelined requests are each answered.

Then, at the gateway itself, with API tokens on: a 2 MiB header without a token is
answered 431 before it is sent whole.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field, replace
from typing import Any

import httpx
import pytest
import uvicorn
from starlette.types import ASGIApp as ASGIApplication
from starlette.types import Receive, Scope, Send

from orbit_services.gateway import GatewayService
from orbit_services.runtime.http_server import HttpLimits, bounded_protocol

from .conftest import OrbitEnv
from .eventually import eventually
from .test_gateway import _free_port

LIMITS = HttpLimits(max_head_bytes=4096, head_timeout=60, body_timeout=60, max_connections=8)
"""Limits whose deadlines no test reaches but those about them."""
DEADLINES = HttpLimits(max_head_bytes=4096, head_timeout=0.5, body_timeout=0.5, max_connections=8)
"""Limits with short deadlines, for the tests that wait for one."""
SLOW_ANSWER = 3.0
"""Seconds the application takes to answer ``/slow``: longer than the deadlines of
:data:`SLOW_DEADLINES`."""
SLOW_DEADLINES = HttpLimits(max_head_bytes=4096, head_timeout=1, body_timeout=1, max_connections=8)
WITHIN = 30.0
"""The bound of every wait for an answer: generous, for a busy machine."""


@dataclass
class Held:
    """Requests to ``/held`` wait until :attr:`release` is set."""

    entered: int = 0
    release: asyncio.Event = field(default_factory=asyncio.Event)


def _app(held: Held) -> ASGIApplication:
    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        """Reads the whole body, then answers 200 with its length (after a while on
        /slow, once released on /held)."""
        assert scope["type"] == "http"
        size = 0
        more = True
        while more:
            message = await receive()
            if message["type"] != "http.request":
                return
            size += len(message.get("body", b""))
            more = message.get("more_body", False)
        if scope["path"] == "/slow":
            await asyncio.sleep(SLOW_ANSWER)
        if scope["path"] == "/held":
            held.entered += 1
            await held.release.wait()
        body = str(size).encode()
        length = str(len(body)).encode()
        headers = [(b"content-type", b"text/plain"), (b"content-length", length)]
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        await send({"type": "http.response.body", "body": body})

    return app


class _Server(uvicorn.Server):
    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield


@contextlib.asynccontextmanager
async def serving(limits: HttpLimits = LIMITS, held: Held | None = None) -> AsyncIterator[int]:
    """The application above served on a free port, held to ``limits``; the port."""
    protocol = bounded_protocol(limits)
    app = _app(held or Held())
    config = uvicorn.Config(
        app, host="127.0.0.1", port=0, http=protocol, lifespan="off", log_config=None
    )
    server = _Server(config)
    task = asyncio.create_task(server.serve())
    try:
        while not server.started:
            assert not task.done(), "the server stopped at start"
            await asyncio.sleep(0.01)
        yield int(server.servers[0].sockets[0].getsockname()[1])
    finally:
        server.should_exit = True
        await task


def head(target: str = "/", method: str = "GET", *headers: str) -> bytes:
    lines = [f"{method} {target} HTTP/1.1", "Host: 127.0.0.1", *headers, "", ""]
    return "\r\n".join(lines).encode("ascii")


async def _answer(reader: asyncio.StreamReader) -> tuple[int, bytes]:
    """The status and body of the next answer on the connection."""
    async with asyncio.timeout(WITHIN):
        status = int((await reader.readline()).split()[1])
        length = 0
        while (line := await reader.readline()) not in (b"\r\n", b""):
            name, _, value = line.decode("latin-1").partition(":")
            if name.strip().lower() == "content-length":
                length = int(value)
        return status, await reader.readexactly(length)


async def _closed(reader: asyncio.StreamReader) -> bool:
    """Whether the gateway closed the connection (it sends nothing more)."""
    async with asyncio.timeout(WITHIN):
        with contextlib.suppress(ConnectionError):
            return await reader.read() == b""
        return True


async def ask(port: int, request: bytes) -> tuple[int, bytes, asyncio.StreamReader]:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(request)
    status, body = await _answer(reader)
    writer.close()
    return status, body, reader


def _error(body: bytes) -> dict[str, Any]:
    error: dict[str, Any] = json.loads(body)["error"]
    return error


async def test_a_head_of_the_limit_is_served_and_one_byte_more_refused_431() -> None:
    async with serving() as port:
        filler = LIMITS.max_head_bytes - len(head("/", "GET", "X-Filler: "))
        exact = head("/", "GET", "X-Filler: " + "a" * filler)
        assert len(exact) == LIMITS.max_head_bytes
        assert (await ask(port, exact))[:2] == (200, b"0")
        over = head("/", "GET", "X-Filler: " + "a" * (filler + 1))
        status, body, _ = await ask(port, over)
        assert status == 431
        assert _error(body)["code"] == "INVALID_REQUEST"
        assert "ORBIT_HTTP_MAX_HEADER_BYTES" in _error(body)["message"]
        # The request line counts too.
        long_target = "/" + "a" * LIMITS.max_head_bytes
        assert (await ask(port, head(long_target)))[0] == 431


async def test_a_long_head_is_answered_before_it_is_sent_whole() -> None:
    async with serving() as port:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(head().removesuffix(b"\r\n") + b"X-Filler: " + b"a" * (256 * 1024))
        # The head is not ended: only its first 4 KiB can have been read.
        assert (await _answer(reader))[0] == 431
        assert await _closed(reader)
        writer.close()


@pytest.mark.parametrize("sent", [b"", b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\n"])
async def test_a_head_that_does_not_come_in_time_closes_the_connection(sent: bytes) -> None:
    async with serving(DEADLINES) as port:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(sent)
        if sent:  # a request had begun: it is told why
            status, body = await _answer(reader)
            assert status == 408
            assert "ORBIT_HTTP_HEADER_TIMEOUT_SECONDS" in _error(body)["message"]
        assert await _closed(reader)
        writer.close()


async def test_a_head_sent_a_byte_at_a_time_has_the_same_deadline() -> None:
    async with serving(DEADLINES) as port:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        dripping = asyncio.create_task(_drip(writer, head().removesuffix(b"\r\n") + b"X-A: "))
        try:
            assert (await _answer(reader))[0] == 408
        finally:
            dripping.cancel()
        writer.close()


async def _drip(writer: asyncio.StreamWriter, data: bytes) -> None:
    for byte in data:
        writer.write(bytes([byte]))
        await asyncio.sleep(0.05)
    while True:
        writer.write(b"a")
        await asyncio.sleep(0.05)


async def test_a_body_that_does_not_come_in_time_is_answered_408() -> None:
    async with serving(DEADLINES) as port:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(head("/", "POST", "Content-Length: 100") + b"0123456789")
        status, body = await _answer(reader)
        assert status == 408
        assert "ORBIT_HTTP_BODY_TIMEOUT_SECONDS" in _error(body)["message"]
        assert await _closed(reader)
        writer.close()


async def test_an_answer_slower_than_the_deadlines_is_sent_and_the_connection_kept() -> None:
    async with serving(SLOW_DEADLINES) as port:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(head("/slow", "POST", "Content-Length: 3") + b"abc")
        assert await _answer(reader) == (200, b"3")
        writer.write(head())
        assert await _answer(reader) == (200, b"0")
        writer.close()


async def test_pipelined_requests_are_each_answered() -> None:
    """Those queued behind a slow answer are not held to the deadlines meanwhile."""
    async with serving(SLOW_DEADLINES) as port:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(head("/slow") + head("/", "POST", "Content-Length: 2") + b"ab" + head())
        assert [await _answer(reader) for _ in range(3)] == [(200, b"0"), (200, b"2"), (200, b"0")]
        writer.close()


async def test_past_the_cap_the_connection_waiting_longest_is_closed() -> None:
    async with serving() as port:
        waiting = [await asyncio.open_connection("127.0.0.1", port) for _ in range(8)]
        for _, writer in waiting:
            writer.write(b"GET / HTTP/1.1\r\n")  # half-open
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=WITHIN) as c:
            assert (await c.get("/")).status_code == 200
        oldest, _ = waiting[0]
        assert await _closed(oldest)
        # The others are still open: the next one ends its request and is answered.
        reader, writer = waiting[1]
        writer.write(b"Host: 127.0.0.1\r\n\r\n")
        assert await _answer(reader) == (200, b"0")
        for _, writer in waiting:
            writer.close()


async def test_past_the_cap_with_every_connection_busy_a_new_one_gets_503() -> None:
    limits = replace(LIMITS, max_connections=2)
    held = Held()
    async with serving(limits, held) as port:
        busy = [await asyncio.open_connection("127.0.0.1", port) for _ in range(2)]
        for _, writer in busy:
            writer.write(head("/held"))

        async def entered() -> int:
            return held.entered

        await eventually(entered, lambda count: count == 2, what="both requests in hand")
        refused, third = await asyncio.open_connection("127.0.0.1", port)
        status, body = await _answer(refused)
        assert status == 503
        assert _error(body)["code"] == "UNAVAILABLE"
        third.close()
        held.release.set()
        for reader, _ in busy:
            assert await _answer(reader) == (200, b"0")
        for _, writer in busy:
            writer.close()


# -- at the gateway, with API tokens on


async def test_a_huge_header_without_a_token_is_refused_431(orbit_env: OrbitEnv) -> None:
    settings = orbit_env.settings_with(http_port=_free_port(), auth="tokens")
    service = GatewayService(settings)
    await service.start()
    try:
        reader, writer = await asyncio.open_connection("127.0.0.1", service.port)
        writer.write(head("/v1/executions").removesuffix(b"\r\n") + b"X-Filler: ")
        sending = asyncio.create_task(_send_megabytes(writer, 2))
        status, body = await _answer(reader)
        assert status == 431, body
        assert _error(body)["code"] == "INVALID_REQUEST"
        sending.cancel()
        writer.close()
    finally:
        await service.stop()


async def _send_megabytes(writer: asyncio.StreamWriter, count: int) -> None:
    with contextlib.suppress(ConnectionError):
        for _ in range(count * 16):
            writer.write(b"a" * 65536)
            await writer.drain()
