"""Attacks on the gateway's HTTP connections by a client with no token (issue 31: items
6, 10 and 11), each while a client with a token is probed and the gateway's memory
measured (:mod:`.harness`):

- huge request heads, held open: each is answered 431 once past
  ``ORBIT_HTTP_MAX_HEADER_BYTES``, and none is read whole;
- slowloris: more half-open requests than the gateway may open files, which takes its
  connections up to ``ORBIT_HTTP_MAX_CONNECTIONS`` and no further;
- bodies posted to the login form, held open: refused once past what a sign-in needs.
"""

from __future__ import annotations

import pytest

from tests.integration.conftest import OrbitEnv

from .harness import Attack, GatewayProcess, gateway_process, held_connections, under_attack

pytestmark = pytest.mark.abuse

MIB = 1024 * 1024
CHUNK = b"a" * (256 * 1024)
TOO_LARGE_HEAD = b"HTTP/1.1 431 Request Header Fields Too Large\r\n"
TOO_LARGE_BODY = b"HTTP/1.1 413 Request Entity Too Large\r\n"


def huge_heads(gateway: GatewayProcess, answers: list[bytes] | None = None) -> Attack:
    """Eight requests whose one header is 32 MiB long, held open (never ended)."""
    first = _head(gateway) + b"X-Filler: "
    return held_connections(gateway, 8, first, CHUNK, 32 * MIB // len(CHUNK), answers=answers)


def half_open(gateway: GatewayProcess, count: int = 600) -> Attack:
    """``count`` requests whose headers never end (slowloris)."""
    return held_connections(gateway, count, _head(gateway))


def sign_in_bodies(gateway: GatewayProcess, answers: list[bytes] | None = None) -> Attack:
    """32 posts of 2 MiB each to the console's sign-in, without a length, held open."""
    first = (
        f"POST /ui/login HTTP/1.1\r\nHost: 127.0.0.1:{gateway.port}\r\n"
        "Content-Type: application/x-www-form-urlencoded\r\n"
        "Transfer-Encoding: chunked\r\n\r\n"
    ).encode("ascii")
    piece = f"{len(CHUNK):x}\r\n".encode("ascii") + CHUNK + b"\r\n"  # one chunk
    return held_connections(gateway, 32, first, piece, 8, answers=answers)


def _head(gateway: GatewayProcess) -> bytes:
    return f"GET /v1/executions HTTP/1.1\r\nHost: 127.0.0.1:{gateway.port}\r\n".encode("ascii")


async def test_huge_request_heads_are_refused_before_they_are_read(orbit_env: OrbitEnv) -> None:
    """Before the bound, the gateway read each head whole (+368 MiB); now each gets 431
    after 64 KiB."""
    answers: list[bytes] = []
    async with gateway_process(orbit_env) as gateway:
        measured = await under_attack(gateway, huge_heads(gateway, answers))
    measured.check(budget=64 * MIB)
    # Each was answered, or closed should its answer have been lost to the bytes after it.
    assert set(answers) <= {TOO_LARGE_HEAD, b""}


async def test_half_open_requests_past_the_open_files_limit(orbit_env: OrbitEnv) -> None:
    """600 half-open requests against a gateway that may open 512 files: before the
    connection cap, no other client was answered."""
    environment = {"ORBIT_HTTP_MAX_CONNECTIONS": "128"}
    async with gateway_process(orbit_env, open_files=512, **environment) as gateway:
        measured = await under_attack(gateway, half_open(gateway))
    measured.check()


async def test_bodies_posted_to_the_sign_in(orbit_env: OrbitEnv) -> None:
    """Before the bound, each body was read whole before any check (+65 MiB)."""
    answers: list[bytes] = []
    async with gateway_process(orbit_env) as gateway:
        measured = await under_attack(gateway, sign_in_bodies(gateway, answers))
    measured.check(budget=32 * MIB)
    assert answers == [TOO_LARGE_BODY] * 32
