"""OrbitClient given several gateways: which requests move to the next, and when.

Each gateway here is a host of an httpx ``MockTransport`` that refuses
connections, times out, answers 503 or answers; the real gateways killed
under load are tests/faults/test_replicas_killed.py's.
"""

from __future__ import annotations

from collections.abc import Callable

import httpx
import pytest

from orbit_sdk import OrbitClient, OrbitClientError
from orbit_sdk.client import gateway_urls

Behaviour = Callable[[httpx.Request], httpx.Response]


def _refuses(request: httpx.Request) -> httpx.Response:
    raise httpx.ConnectError("connection refused", request=request)


def _times_out(request: httpx.Request) -> httpx.Response:
    raise httpx.ReadTimeout("no answer", request=request)


def _unavailable(request: httpx.Request) -> httpx.Response:
    return httpx.Response(503, json={"error": {"code": "UNAVAILABLE", "message": "busy"}})


def _answers(request: httpx.Request) -> httpx.Response:
    if request.url.path == "/v1/executions" and request.method == "POST":
        return httpx.Response(200, json={"execution_id": "e-1", "created": True})
    if "/signals/" in request.url.path:
        return httpx.Response(200, json={"seq": 7})
    return httpx.Response(200, json=[])


class Gateways:
    """Hosts gw-1, gw-2… each with its behaviour; remembers which host each request hit."""

    def __init__(self, *behaviours: Behaviour) -> None:
        self.behaviours = {f"gw-{n}": b for n, b in enumerate(behaviours, start=1)}
        self.hits: list[str] = []

    def client(self) -> OrbitClient:
        urls = [f"http://{host}" for host in self.behaviours]
        return OrbitClient(urls, transport=httpx.MockTransport(self._handle))

    def _handle(self, request: httpx.Request) -> httpx.Response:
        self.hits.append(request.url.host)
        return self.behaviours[request.url.host](request)


async def test_a_refused_connection_moves_every_request_on_and_stays_there() -> None:
    gateways = Gateways(_refuses, _answers)
    async with gateways.client() as client:
        assert await client.workers() == []
        # Never reached, so even a start without an id may go to the next one.
        assert (await client.start("w"))["created"] is True
        assert client.url == "http://gw-2"
    assert gateways.hits == ["gw-1", "gw-2", "gw-2"]


async def test_what_may_have_reached_a_gateway_is_sent_again_only_if_that_is_harmless() -> None:
    for behaviour in (_unavailable, _times_out):
        gateways = Gateways(behaviour, _answers)
        async with gateways.client() as client:
            with pytest.raises(OrbitClientError) as raised:
                await client.start("w")  # twice would start two executions
            assert raised.value.code == "UNAVAILABLE"
            assert (await client.start("w", execution_id="e-1"))["execution_id"] == "e-1"
            assert gateways.hits == ["gw-1", "gw-1", "gw-2"]


async def test_a_signal_moves_on_only_with_its_request_id() -> None:
    gateways = Gateways(_times_out, _answers)
    async with gateways.client() as client:
        with pytest.raises(OrbitClientError):
            await client.signal("e-1", "go", {"ok": True})
        assert await client.signal("e-1", "go", {"ok": True}, request_id="r-1") == 7
    assert gateways.hits == ["gw-1", "gw-1", "gw-2"]


async def test_when_every_gateway_is_down_the_error_names_them_all() -> None:
    gateways = Gateways(_refuses, _refuses, _refuses)
    async with gateways.client() as client:
        with pytest.raises(OrbitClientError) as raised:
            await client.workers()
    assert raised.value.code == "UNAVAILABLE"
    assert "any of http://gw-1, http://gw-2, http://gw-3" in raised.value.message
    assert gateways.hits == ["gw-1", "gw-2", "gw-3"]


def test_gateway_urls_are_one_a_comma_list_or_a_sequence() -> None:
    assert gateway_urls("http://a:1/") == ("http://a:1",)
    assert gateway_urls(" http://a:1 , https://b:2/,") == ("http://a:1", "https://b:2")
    assert gateway_urls(["http://a:1", "http://b:2"]) == ("http://a:1", "http://b:2")
    for bad in ("", " , ", "a:1", "http://a:1,ftp://b"):
        with pytest.raises(ValueError, match="URL"):
            gateway_urls(bad)
