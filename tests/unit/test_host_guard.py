"""The gateway serves only the Host values it is meant to (against DNS rebinding)."""

from __future__ import annotations

import pytest

from orbit_services.gateway.edge.hosts import HostGuard


async def _app(scope: object, receive: object, send: object) -> None:  # pragma: no cover
    raise AssertionError("not called")


def guard(
    allowed: tuple[str, ...] = (), bind_host: str = "127.0.0.1", port: int = 8080
) -> HostGuard:
    return HostGuard(_app, allowed, bind_host, port)


@pytest.mark.parametrize(
    ("host", "served"),
    [
        ("127.0.0.1:8080", True),
        ("localhost:8080", True),
        ("LOCALHOST:8080", True),
        ("[::1]:8080", True),
        ("localhost:9090", False),  # another port: another engine's name
        ("localhost", False),
        ("attacker.example:8080", False),  # a rebound name
        ("attacker.example", False),
        ("", False),
    ],
)
def test_by_default_the_loopback_names_on_the_port(host: str, served: bool) -> None:
    assert guard().serves(host) is served


def test_the_bind_address_is_served_too() -> None:
    assert guard(bind_host="10.0.0.5").serves("10.0.0.5:8080")
    assert guard(bind_host="::1").serves("[::1]:8080")
    assert not guard(bind_host="10.0.0.5").serves("10.0.0.6:8080")


def test_on_port_80_a_host_without_its_port_is_served() -> None:
    assert guard(port=80).serves("localhost")


def test_a_configured_list_replaces_the_defaults() -> None:
    listed = guard(("orbit.example.com", "10.0.0.5:8080"))
    assert listed.serves("orbit.example.com")
    assert listed.serves("orbit.example.com:443")  # listed without a port: any port
    assert listed.serves("10.0.0.5:8080")
    assert not listed.serves("10.0.0.5:9090")
    assert not listed.serves("localhost:8080")
    assert guard(("*",)).serves("anything:1")
