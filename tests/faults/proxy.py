"""A TCP proxy that can cut its link silently: connections stay open, and nothing passes.

That is what a network partition looks like to both ends (packets dropped, no RST, no
FIN): nothing fails, nothing answers. A fault test points one process at the proxy
(its Postgres or RabbitMQ address) and calls :meth:`SilentProxy.cut`, later
:meth:`SilentProxy.mend`. The proxy runs in the test's event loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
from urllib.parse import urlsplit, urlunsplit


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


class SilentProxy:
    """Forwards 127.0.0.1:``port`` to ``target_port`` until :meth:`cut`."""

    def __init__(self, target_port: int) -> None:
        self.target_port = target_port
        self.port = _free_port()
        self._open = asyncio.Event()
        self._open.set()
        self._server: asyncio.Server | None = None
        self._pipes: set[asyncio.Task[None]] = set()
        self._cut_at: bytes | None = None

    def address(self, url: str) -> str:
        """``url`` with its host and port replaced by the proxy's."""
        parts = urlsplit(url)
        credentials = parts.netloc.rpartition("@")[0]
        netloc = f"{credentials}@127.0.0.1:{self.port}" if credentials else f"127.0.0.1:{self.port}"
        return urlunsplit(parts._replace(netloc=netloc))

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", self.port)

    def cut(self) -> None:
        """Stop forwarding: what either side sends is held back, and nothing is closed."""
        self._open.clear()

    def cut_when_sent(self, marker: bytes) -> None:
        """Cut the link as soon as a client sends ``marker`` (its bytes included: they
        never arrive), say the ``COMMIT`` of a transaction half done."""
        self._cut_at = marker

    def mend(self) -> None:
        self._cut_at = None
        self._open.set()

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
        for pipe in list(self._pipes):
            pipe.cancel()
        with contextlib.suppress(Exception):
            await asyncio.gather(*self._pipes, return_exceptions=True)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            upstream_reader, upstream_writer = await asyncio.open_connection(
                "127.0.0.1", self.target_port
            )
        except OSError:
            writer.close()
            return
        for source, sink, upstream in (
            (reader, upstream_writer, True),
            (upstream_reader, writer, False),
        ):
            pipe = asyncio.create_task(self._pipe(source, sink, upstream))
            self._pipes.add(pipe)
            pipe.add_done_callback(self._pipes.discard)

    async def _pipe(
        self, source: asyncio.StreamReader, sink: asyncio.StreamWriter, upstream: bool
    ) -> None:
        try:
            while True:
                data = await source.read(65536)
                if upstream and self._cut_at is not None and self._cut_at in data:
                    self.cut()
                await self._open.wait()  # while cut, held here: nothing passes, not even EOF
                if not data:
                    break
                sink.write(data)
                await sink.drain()
        except (ConnectionError, OSError):
            pass
        finally:
            with contextlib.suppress(Exception):
                sink.close()
