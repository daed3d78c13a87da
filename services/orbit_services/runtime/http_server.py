"""HTTP/1.1 connections bounded before any request reaches the application
(docs/operations.md, "HTTP connections").

Left alone, uvicorn reads a request's head (its request line and headers) whole however
large it is, waits for it and for its body as long as a client likes, and accepts
connections until the process runs out of file descriptors: one client without a token
can fill the memory or take every connection. :func:`bounded_protocol` is uvicorn's
httptools protocol with:

- a head of at most ``max_head_bytes``, counted as it arrives: one byte more and the
  request is answered 431 before more is read;
- a deadline for the head, from the connection's start or from the last answer on it,
  and one for the body, from the end of the head: past either, 408;
- at most ``max_connections`` connections. One more closes the connection that has
  waited longest on its client (for a head, a body, or to read its answer): an idle
  keep-alive connection or a slow client's. When none waits, the new one gets 503.

uvicorn's own ``limit_concurrency`` is not used: it counts half-open connections too,
and answers every new request 503 while a slow client holds them.

A refusal is sent and the connection is shut for writing, and what the client still
sends is read and dropped for :data:`LINGER_SECONDS` (closing a socket with unread bytes
resets it, and the client would lose the answer).
"""

from __future__ import annotations

import asyncio
import json
import logging
import resource
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any, ClassVar

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from orbit_model.errors import ErrorCode
from orbit_services.runtime.settings import Settings

log = logging.getLogger("orbit.http")

LINGER_SECONDS = 1.0
"""How long a refused connection's input is read and dropped before it is closed."""
ACCEPT_BURST = 2048
"""Connections asyncio may accept at once before the cap closes any (uvicorn's backlog)."""
FILES_BESIDE_CONNECTIONS = ACCEPT_BURST + 512
"""File descriptors a process needs beside the connections it holds: a burst of new
ones, and 512 for the pools of Postgres connections, RabbitMQ, the HTTP adapter's
requests in ``orbit dev`` and its own files."""


@dataclass(frozen=True)
class HttpLimits:
    """What a connection may take (the ``ORBIT_HTTP_*`` settings of the same names)."""

    max_head_bytes: int
    head_timeout: float
    body_timeout: float
    max_connections: int

    @classmethod
    def of(cls, settings: Settings) -> HttpLimits:
        return cls(
            max_head_bytes=settings.http_max_header_bytes,
            head_timeout=settings.http_header_timeout_seconds,
            body_timeout=settings.http_body_timeout_seconds,
            max_connections=settings.http_max_connections,
        )


def bounded_protocol(limits: HttpLimits) -> type[asyncio.Protocol]:
    """uvicorn's httptools protocol held to ``limits`` (``uvicorn.Config(http=...)``)."""
    return type(
        "BoundedHttpTools", (_BoundedHttpTools,), {"limits": limits, "waiting": OrderedDict()}
    )


def ensure_open_files(connections: int) -> None:
    """Raise this process's soft limit of open files to what ``connections`` need beside
    :data:`FILES_BESIDE_CONNECTIONS`, as far as its hard limit allows; warn if it falls
    short (the fix: ``ulimit -n``, or ``LimitNOFILE`` in a systemd unit)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    needed = connections + FILES_BESIDE_CONNECTIONS
    if soft == resource.RLIM_INFINITY or soft >= needed:
        return
    raised = needed if hard == resource.RLIM_INFINITY else min(needed, hard)
    resource.setrlimit(resource.RLIMIT_NOFILE, (raised, hard))
    if raised < needed:
        log.warning(
            "this process may open %d files, and ORBIT_HTTP_MAX_CONNECTIONS=%d needs %d:"
            " raise its limit (ulimit -n) or lower the setting (docs/operations.md)",
            raised,
            connections,
            needed,
            extra={"action": "http.open_files"},
        )


def refusal(status: int, code: ErrorCode, message: str) -> bytes:
    """A whole HTTP answer with Orbit's error body, after which the connection closes."""
    body = json.dumps({"error": {"code": code.value, "message": message}}).encode()
    reason = {408: "Request Timeout", 431: "Request Header Fields Too Large"}.get(
        status, "Service Unavailable"
    )
    head = (
        f"HTTP/1.1 {status} {reason}\r\ncontent-type: application/json\r\n"
        f"content-length: {len(body)}\r\nconnection: close\r\n\r\n"
    )
    return head.encode("ascii") + body


_TOO_LARGE = refusal(
    431,
    ErrorCode.INVALID_REQUEST,
    "the request line and headers are over the gateway's limit (ORBIT_HTTP_MAX_HEADER_BYTES)",
)
_HEAD_TOO_SLOW = refusal(
    408,
    ErrorCode.INVALID_REQUEST,
    "the request line and headers did not arrive in time (ORBIT_HTTP_HEADER_TIMEOUT_SECONDS)",
)
_BODY_TOO_SLOW = refusal(
    408,
    ErrorCode.INVALID_REQUEST,
    "the request body did not arrive in time (ORBIT_HTTP_BODY_TIMEOUT_SECONDS)",
)
_FULL = refusal(
    503,
    ErrorCode.UNAVAILABLE,
    "the gateway has all the connections it may hold (ORBIT_HTTP_MAX_CONNECTIONS)",
)


class _BoundedHttpTools(HttpToolsProtocol):
    """One connection; see the module. A connection is in one of these states: awaiting
    a head (its deadline armed), awaiting a body (its deadline armed), busy with a
    request the application holds, or refused (lingering)."""

    limits: ClassVar[HttpLimits]
    waiting: ClassVar[OrderedDict[_BoundedHttpTools, None]]
    """The server's connections that wait on their clients, in the order they are to
    close for room: refused ones, then the one that has waited longest."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._head_bytes = 0
        self._awaiting_head = True
        self._deadline: asyncio.TimerHandle | None = None
        self._refused = False

    # -- the connection's life

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        if len(self.connections) > self.limits.max_connections and not self._make_room():
            self._refused = True
            transport.write(_FULL)
            transport.close()
            return
        self._await(self.limits.head_timeout, self._head_too_slow)

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        self.waiting.pop(self, None)
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        if self._refused:
            return  # dropped while the refusal lingers
        if not self._awaiting_head:
            super().data_received(data)
            return
        room = self.limits.max_head_bytes - self._head_bytes
        if len(data) <= room:
            self._head_bytes += len(data)
            super().data_received(data)
            return
        # Feed what the limit leaves room for: if the head ends within it, the rest is
        # its body (and perhaps the start of the next request, whose head is counted
        # from the next read on: it may take one read, 256 KiB, more than the limit).
        self._head_bytes += room
        if room:
            super().data_received(data[:room])
        if self.transport.is_closing() or self._refused:
            return
        if self._awaiting_head:
            self._refuse(_TOO_LARGE)
            return
        super().data_received(data[room:])

    # -- the parser's callbacks, and uvicorn's at the end of an answer

    def on_headers_complete(self) -> None:
        self._awaiting_head = False
        self._disarm()
        super().on_headers_complete()
        # Until the body is complete (on_message_complete, maybe in this same read);
        # a request queued behind another (pipelined) is not read until it starts.
        if not self.pipeline:
            self._await(self.limits.body_timeout, self._body_too_slow)

    def on_message_complete(self) -> None:
        super().on_message_complete()
        self._disarm()
        self._awaiting_head = True
        self._head_bytes = 0
        if self.cycle is not None and self.cycle.response_complete and not self.pipeline:
            self._await(self.limits.head_timeout, self._head_too_slow)

    def on_response_complete(self) -> None:
        queued = bool(self.pipeline)
        super().on_response_complete()
        if self.transport.is_closing() or self._deadline is not None:
            return
        if not queued and self._awaiting_head:
            self._await(self.limits.head_timeout, self._head_too_slow)
        elif queued and not self._awaiting_head:  # a queued request whose body is to come
            self._await(self.limits.body_timeout, self._body_too_slow)

    def pause_writing(self) -> None:
        super().pause_writing()
        self._wait_on_client()

    def resume_writing(self) -> None:
        super().resume_writing()
        if self._deadline is None and not self._refused:
            self.waiting.pop(self, None)

    # -- the bounds

    def _wait_on_client(self, *, first: bool = False) -> None:
        """The gateway now waits on this connection's client: for a head or a body (a
        deadline is armed), to read the answer, or to go (a refusal lingers: ``first``
        to close for room)."""
        self.waiting[self] = None
        self.waiting.move_to_end(self, last=not first)

    def _await(self, seconds: float, expired: Any) -> None:
        self._disarm()
        self._deadline = self.loop.call_later(seconds, expired)
        self._wait_on_client()

    def _disarm(self) -> None:
        if self._deadline is not None:
            self._deadline.cancel()
            self._deadline = None
        if not self._refused and not (self.flow is not None and self.flow.write_paused):
            self.waiting.pop(self, None)

    def _head_too_slow(self) -> None:
        self._deadline = None
        if self._head_bytes == 0:  # nothing of a request came: an idle connection
            self.transport.close()
        else:
            self._refuse(_HEAD_TOO_SLOW)

    def _body_too_slow(self) -> None:
        self._deadline = None
        if self.cycle is not None and self.cycle.response_started:
            self.transport.close()  # too late for an answer
        else:
            self._refuse(_BODY_TOO_SLOW)

    def _refuse(self, answer: bytes) -> None:
        """Answer ``answer``, drop what the client still sends, close soon."""
        self._disarm()
        self._refused = True
        self._wait_on_client(first=True)
        if self.cycle is not None:  # the application sees the client go, and sends nothing
            self.cycle.disconnected = True
            self.cycle.message_event.set()
        self.transport.write(answer)
        if self.transport.can_write_eof():
            self.transport.write_eof()
        self.loop.call_later(LINGER_SECONDS, self.transport.close)

    def _make_room(self) -> bool:
        """Close the connection that has waited longest on its client; False if none
        waits (every other one is busy with a request)."""
        for other in self.waiting:
            if other is not self and not other.transport.is_closing():
                other.transport.close()
                # Counted no more from now, not from its connection_lost (the next turn
                # of the loop), when others may have come.
                self.connections.discard(other)
                return True
        return False
