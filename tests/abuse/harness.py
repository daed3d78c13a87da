"""Availability under attack: a gateway in a process of its own, attacks against it, its
memory measured and a client with a token probing it while they run.

An attack is an async context manager over the gateway: entered, it is under way (its
connections open, its requests in flight, or a task of its own sending them); left, it
stops. :func:`under_attack` enters every attack given, then probes the gateway as a
second client would, while it samples the gateway process's resident memory;
:meth:`Measured.check` holds the result to the budget below. A new attack is a function
of this shape, and a test of its own (or one more attack in a test that runs several at
once), in a module of this package marked ``abuse`` (``make test-abuse`` runs them)::

    pytestmark = pytest.mark.abuse

    async def test_my_attack(orbit_env: OrbitEnv) -> None:
        async with gateway_process(orbit_env) as gateway:
            measured = await under_attack(gateway, my_attack(gateway), other_attack(gateway))
        measured.check()

The figures are printed (``pytest -s``, or the captured output of a failure), so a run
says what it measured, not only that it passed.
"""

from __future__ import annotations

import asyncio
import contextlib
import resource
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass, field

import httpx

from orbit_model.access import TokenScope
from orbit_services.store import EventStore
from tests.e2e.stack import free_port
from tests.faults.processes import orbit_env_vars
from tests.integration.conftest import OrbitEnv
from tests.integration.eventually import eventually

MEMORY_BUDGET = 1024 * 1024 * 1024
"""What the gateway's resident memory may grow by above idle while attacked
(docs/security.md, "Availability")."""
PROBE_BOUND = 10.0
"""The longest a probe may wait for its answer. The issue's mark is 1 s, and the figures
printed show what was measured; the bound a test holds to is wider, for a machine busy
with other work."""
PROBES = 5
"""Probes per attack, one after the other."""
PROBE_PAUSE = 0.2
"""Seconds between two probes."""
START_WITHIN = 60.0
"""How long the gateway process may take to answer its first request."""
SENDING_WITHIN = 30.0
"""How long the attackers of :func:`held_connections` may take to send what they send
(then they hold their connections)."""

Attack = AbstractAsyncContextManager[object]


@dataclass
class GatewayProcess:
    """``orbit service gateway`` in a process of its own, with API tokens on."""

    process: asyncio.subprocess.Process
    port: int
    admin_token: str
    reader_token: str
    """A token with ``executions:read`` only: the probing client's."""

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def rss(self) -> int:
        """The process's resident memory, in bytes."""
        with open(f"/proc/{self.process.pid}/status", encoding="ascii") as status:
            for line in status:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) * 1024
        raise AssertionError("the gateway process has no VmRSS (it exited?)")

    async def connect(self) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        """A raw connection to the gateway, as an attacker opens one."""
        return await asyncio.open_connection("127.0.0.1", self.port)


@contextlib.asynccontextmanager
async def gateway_process(
    env: OrbitEnv, *, open_files: int | None = None, **environment: str
) -> AsyncIterator[GatewayProcess]:
    """A gateway over ``env``'s database and namespace, with ``ORBIT_*`` ``environment``
    on top, and at most ``open_files`` file descriptors (``ulimit -n``) when given."""
    store = await EventStore.connect(env.settings.database_url, min_size=1, max_size=1)
    try:
        _, admin = await store.tokens.create("abuse-admin", frozenset({TokenScope.ADMIN}))
        _, reader = await store.tokens.create(
            "abuse-reader", frozenset({TokenScope.EXECUTIONS_READ})
        )
    finally:
        await store.close()
    port = free_port()
    variables = orbit_env_vars(
        env.settings, ORBIT_AUTH="tokens", ORBIT_HTTP_PORT=str(port), **environment
    )
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "orbit_sdk",
        "service",
        "gateway",
        env=variables,
        preexec_fn=None if open_files is None else _limit_open_files(open_files),
    )
    gateway = GatewayProcess(process, port, admin, reader)
    try:
        await eventually(_answers(gateway), timeout=START_WITHIN, what="the gateway's /healthz")
        yield gateway
    finally:
        await _stop(process)


def _limit_open_files(count: int) -> Callable[[], None]:
    def limit() -> None:
        resource.setrlimit(resource.RLIMIT_NOFILE, (count, count))

    return limit


def _answers(gateway: GatewayProcess) -> Callable[[], Awaitable[bool]]:
    async def probe() -> bool:
        if gateway.process.returncode is not None:
            raise AssertionError(f"the gateway exited with {gateway.process.returncode}")
        try:
            async with httpx.AsyncClient(base_url=gateway.url, timeout=2) as client:
                return (await client.get("/healthz")).status_code == 200
        except httpx.HTTPError:
            return False

    return probe


async def _stop(process: asyncio.subprocess.Process) -> None:
    if process.returncode is None:
        process.terminate()
        try:
            async with asyncio.timeout(30):
                await process.wait()
        except TimeoutError:
            process.kill()
            await process.wait()


@dataclass
class Measured:
    """What :func:`under_attack` saw."""

    idle_rss: int
    peak_rss: int = 0
    answers: list[float] = field(default_factory=list)
    """Seconds each probe waited for its answer."""
    failures: list[str] = field(default_factory=list)
    """Probes that got no 200, and what they got."""

    @property
    def growth(self) -> int:
        return max(0, self.peak_rss - self.idle_rss)

    def report(self) -> str:
        slowest = max(self.answers, default=float("nan"))
        return (
            f"gateway RSS idle {self.idle_rss / 2**20:.1f} MiB, peak"
            f" {self.peak_rss / 2**20:.1f} MiB (+{self.growth / 2**20:.1f} MiB);"
            f" {len(self.answers)} probes answered, slowest {slowest:.3f} s;"
            f" failed: {self.failures or 'none'}"
        )

    def check(self, budget: int = MEMORY_BUDGET, within: float = PROBE_BOUND) -> None:
        """The gateway grew by less than ``budget`` bytes, and every probe was answered
        200 within ``within`` seconds."""
        assert not self.failures, self.report()
        assert len(self.answers) >= PROBES, self.report()
        assert max(self.answers) < within, self.report()
        assert self.growth < budget, self.report()


async def under_attack(gateway: GatewayProcess, *attacks: Attack) -> Measured:
    """Enter ``attacks``, probe the gateway :data:`PROBES` times as a client with a token
    while they are under way, then leave them; the gateway's memory is sampled
    throughout."""
    await _probe(gateway, Measured(0))  # the first request of a process costs more
    measured = Measured(gateway.rss())
    measured.peak_rss = measured.idle_rss
    sampling = asyncio.create_task(_sample(gateway, measured))
    try:
        async with contextlib.AsyncExitStack() as stack:
            for attack in attacks:
                await stack.enter_async_context(attack)
            for _ in range(PROBES):
                await _probe(gateway, measured)
                await asyncio.sleep(PROBE_PAUSE)
    finally:
        sampling.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await sampling
    measured.peak_rss = max(measured.peak_rss, gateway.rss())
    print(measured.report())
    return measured


async def _sample(gateway: GatewayProcess, measured: Measured) -> None:
    while True:
        measured.peak_rss = max(measured.peak_rss, gateway.rss())
        await asyncio.sleep(0.01)


async def _probe(gateway: GatewayProcess, measured: Measured) -> None:
    """One request on a connection of its own, as a new client makes it."""
    headers = {"authorization": f"Bearer {gateway.reader_token}"}
    began = time.monotonic()
    try:
        async with httpx.AsyncClient(base_url=gateway.url, timeout=PROBE_BOUND) as client:
            response = await client.get("/v1/executions", params={"limit": 1}, headers=headers)
    except httpx.HTTPError as error:
        measured.failures.append(f"{type(error).__name__}: {error}")
        return
    if response.status_code != 200:
        measured.failures.append(f"{response.status_code}: {response.text[:200]}")
        return
    measured.answers.append(time.monotonic() - began)


async def _send(writer: asyncio.StreamWriter, first: bytes, piece: bytes, times: int) -> None:
    """``first``, then ``piece`` ``times`` over, as fast as the gateway reads them."""
    writer.write(first)
    for _ in range(times):
        writer.write(piece)
        await writer.drain()


async def _hold(
    gateway: GatewayProcess,
    first: bytes,
    piece: bytes,
    times: int,
    *,
    sent: asyncio.Future[None],
    answers: list[bytes],
) -> None:
    """Open a connection, send ``first`` and ``piece`` ``times`` over (then ``sent`` is
    done), and keep it open until cancelled; the first line of any answer goes to
    ``answers``."""
    try:
        reader, writer = await gateway.connect()
        try:
            with contextlib.suppress(ConnectionError):
                await _send(writer, first, piece, times)
            sent.set_result(None)
            with contextlib.suppress(ConnectionError):
                answers.append(await reader.readline())
            await asyncio.Event().wait()  # held until the attack ends
        finally:
            writer.close()
    finally:
        if not sent.done():
            sent.set_result(None)


@contextlib.asynccontextmanager
async def held_connections(
    gateway: GatewayProcess,
    count: int,
    first: bytes,
    piece: bytes = b"",
    times: int = 0,
    *,
    answers: list[bytes] | None = None,
) -> AsyncIterator[None]:
    """``count`` connections, each sending ``first`` and ``piece`` ``times`` over, held
    open while the attack lasts; the first line of each answer they got goes to
    ``answers`` (empty: the connection was closed)."""
    loop = asyncio.get_running_loop()
    answers = [] if answers is None else answers
    sent = [loop.create_future() for _ in range(count)]
    tasks = [
        asyncio.create_task(_hold(gateway, first, piece, times, sent=done, answers=answers))
        for done in sent
    ]
    try:
        await asyncio.wait(sent, timeout=SENDING_WITHIN)
        yield
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


@contextlib.asynccontextmanager
async def in_background(work: Awaitable[None]) -> AsyncIterator[None]:
    """An attack that is a coroutine sending requests until it is cancelled (or done)."""
    task = asyncio.ensure_future(work)
    try:
        yield
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
