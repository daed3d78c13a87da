"""The service host: what a start acquired is released in reverse, whatever fails."""

from __future__ import annotations

import asyncio
import logging

import pytest

from orbit_services.runtime.host import Host


class Opened:
    """A resource that says when it is released."""

    def __init__(self, name: str, released: list[str]) -> None:
        self.name = name
        self._released = released

    async def close(self) -> None:
        self._released.append(self.name)


async def _open(name: str, released: list[str]) -> Opened:
    return Opened(name, released)


async def test_stop_releases_in_reverse_once() -> None:
    released: list[str] = []
    host = Host("test")

    async def steps(host: Host) -> None:
        await host.acquire("a", _open("a", released), lambda it: it.close)
        host.on_stop("b", lambda: released.append("b"))  # a plain function will do
        await host.acquire("c", _open("c", released), lambda it: it.close)

    await host.start(steps)
    assert released == []
    await host.stop()
    await host.stop()
    assert released == ["c", "b", "a"]


async def test_a_failed_step_releases_the_earlier_ones_and_raises_its_error() -> None:
    released: list[str] = []
    host = Host("test")

    async def steps(host: Host) -> None:
        await host.acquire("a", _open("a", released), lambda it: it.close)
        await host.acquire("b", _open("b", released), lambda it: it.close)
        raise LookupError("the third step")

    with pytest.raises(LookupError, match="third step"):
        await host.start(steps)
    assert released == ["b", "a"]
    assert host.stopping


async def test_a_failed_release_is_logged_and_the_others_run(
    caplog: pytest.LogCaptureFixture,
) -> None:
    released: list[str] = []
    host = Host("test")

    async def broken() -> None:
        raise ConnectionError("gone")

    async def steps(host: Host) -> None:
        await host.acquire("a", _open("a", released), lambda it: it.close)
        host.on_stop("the broken one", broken)
        await host.acquire("c", _open("c", released), lambda it: it.close)

    await host.start(steps)
    with caplog.at_level(logging.ERROR, logger="orbit.host"):
        await host.stop()
    assert released == ["c", "a"]
    assert "test: releasing the broken one failed" in caplog.text


async def test_background_tasks_are_cancelled_and_awaited() -> None:
    ended = asyncio.Event()
    host = Host("test")

    async def forever() -> None:
        try:
            await asyncio.Event().wait()
        finally:
            ended.set()

    async def steps(host: Host) -> None:
        host.run(forever(), "forever")

    await host.start(steps)
    await asyncio.sleep(0)
    await host.stop()
    assert ended.is_set()


async def test_a_task_that_failed_is_reported_at_stop(caplog: pytest.LogCaptureFixture) -> None:
    host = Host("test")

    async def failing() -> None:
        raise ValueError("it broke")

    async def steps(host: Host) -> None:
        host.run(failing(), "failing")

    await host.start(steps)
    await asyncio.sleep(0)
    with caplog.at_level(logging.ERROR, logger="orbit.host"):
        await host.stop()
    assert "releasing failing failed" in caplog.text
