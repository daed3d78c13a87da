"""The Orbit under test: its own database and namespace, each service its own process.

``BenchStack`` creates ``orbit_bench_<random>``, migrates it, starts the
decider, dispatcher, timer and gateway as ``python -m orbit_sdk service NAME``
processes (settings as ``ORBIT_*`` variables, as in a real deployment), deploys
the benchmark's workflows, starts the no-op worker as one more process, and on
the way out stops them all, drops the database and deletes the namespace's
queues, exchanges, RabbitMQ users and policy.

As in a real installation, every process logs in to RabbitMQ as its own user
(``ORBIT_BROKER_AUTH=roles``): the namespace's users are made through the
management API with fresh passwords (``provision_local_roles``), each service
gets ``NS.<role>``, the worker ``NS.worker.bench`` and the bench's AMQP client
``NS.client.bench``. Only the bench's own broker chores (queue counts,
clean-up, the machine limits) use the administrator's ``--amqp-url``.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import socket
import sys
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import IO
from urllib.parse import urlsplit, urlunsplit

import aio_pika
import asyncpg
import httpx

from bench import workflows
from orbit_model.access import TokenScope
from orbit_model.topology import Topology
from orbit_sdk import OrbitClient
from orbit_services.commands.broker_setup import (
    BrokerAdmin,
    LocalRoles,
    provision_local_roles,
    remove_namespace,
)
from orbit_services.runtime.settings import Settings, load_settings
from orbit_services.store import EventStore
from orbit_services.store.migrate import migrate

SERVICES = ("decider", "dispatcher", "timer", "gateway")
ROOT = Path(__file__).resolve().parent.parent


L2_CONNECTIONS = 16_384
"""The gateways' ``ORBIT_HTTP_MAX_CONNECTIONS``: L2's waiting clients and the rest."""


def _free_ports(count: int) -> list[int]:
    """``count`` ports free now, all different: each is held until every one is chosen
    (chosen one at a time, two could be the same, and a gateway then found its port
    taken by another process's /metrics)."""
    with contextlib.ExitStack() as held:
        probes = [held.enter_context(socket.socket()) for _ in range(count)]
        for probe in probes:
            probe.bind(("127.0.0.1", 0))
        return [int(probe.getsockname()[1]) for probe in probes]


def _with_database(url: str, name: str) -> str:
    return urlunsplit(urlsplit(url)._replace(path=f"/{name}"))


@dataclass
class Proc:
    name: str
    process: asyncio.subprocess.Process
    log_path: Path
    log: IO[bytes]

    @property
    def pid(self) -> int:
        return self.process.pid

    def tail(self, lines: int = 30) -> str:
        self.log.flush()
        text = self.log_path.read_text(errors="replace").splitlines()
        return "\n".join(text[-lines:])


@dataclass
class BenchStack:
    server_url: str
    amqp_url: str
    log_dir: Path
    say: object = print
    partitions: int = 32
    worker_concurrency: int = 64
    deciders: int = 1
    """Decider processes: the first is ``decider``, the others ``decider-2``, ``decider-3``…"""
    gateways: int = 1
    """Gateway processes: ``gateway`` on :attr:`http_port`, then ``gateway-2``… each on a
    port of its own (:attr:`gateway_ports`)."""
    decider_batch_size: int | None = None
    """``ORBIT_DECIDER_BATCH_SIZE`` of the deciders; None: the default."""
    definitions: dict[str, str] = field(default_factory=dict)
    """Workflows deployed besides bench/workflows.py's (W5's and W6's)."""
    service_env: dict[str, str] = field(default_factory=dict)
    """More ``ORBIT_*`` settings of every service (W6's history limit)."""
    suffix: str = field(default_factory=lambda: uuid.uuid4().hex[:8])
    procs: dict[str, Proc] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.database = f"orbit_bench_{self.suffix}"
        self.namespace = f"bench{self.suffix}"
        # Every process serves its own /metrics: the cost per step is counted from them.
        metered = [*self.services, "worker"]
        replicas = [f"gateway-{n}" for n in range(2, self.gateways + 1)]
        ports = _free_ports(1 + len(metered) + len(replicas))
        self.http_port = ports[0]
        self.metrics_ports = dict(zip(metered, ports[1 : 1 + len(metered)], strict=True))
        self.gateway_ports = {"gateway": self.http_port} | dict(
            zip(replicas, ports[1 + len(metered) :], strict=True)
        )
        self.metrics_ports.update(self.gateway_ports)  # a gateway serves it on its port
        self.settings: Settings = load_settings(
            database_url=_with_database(self.server_url, self.database),
            amqp_url=self.amqp_url,
            namespace=self.namespace,
            decider_partitions=self.partitions,
            http_port=self.http_port,
        )
        self.topology = Topology(self.namespace, self.partitions)
        self.client = OrbitClient(f"http://127.0.0.1:{self.http_port}", timeout=60.0)
        self.roles: LocalRoles | None = None
        self.token: str | None = None
        self._users_made = False

    @property
    def client_settings(self) -> Settings:
        """The settings of the bench's AMQP client: logging in as ``NS.client.bench``."""
        if self.roles is None:
            raise RuntimeError("the stack is not started: no RabbitMQ client user yet")
        return self.settings.model_copy(update={"amqp_url": self.roles.client})

    # -- lifecycle ------------------------------------------------------------------

    async def __aenter__(self) -> BenchStack:
        try:
            await self._start()
        except BaseException:
            await self.close()
            raise
        return self

    async def __aexit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        await self.close()

    @property
    def services(self) -> tuple[str, ...]:
        """The service processes' names, each decider's its own."""
        extra = tuple(f"decider-{n}" for n in range(2, self.deciders + 1))
        more_gateways = tuple(f"gateway-{n}" for n in range(2, self.gateways + 1))
        return (*SERVICES, *extra, *more_gateways)

    def metrics_urls(self) -> dict[str, str]:
        """The ``/metrics`` of each service and of the worker."""
        return {
            name: f"http://127.0.0.1:{port}/metrics" for name, port in self.metrics_ports.items()
        }

    def _amqp_url_of(self, name: str) -> str:
        """The login of process ``name``: its service's user, or the worker's."""
        if self.roles is None:
            raise RuntimeError("the RabbitMQ users are made before any process starts")
        if name == "worker":
            return self.roles.worker
        return self.roles.services[name.partition("-")[0]]  # decider-2 is a decider

    def _env(self, name: str) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("ORBIT_")}
        env.update(
            {
                "ORBIT_DATABASE_URL": self.settings.database_url,
                "ORBIT_AMQP_URL": self._amqp_url_of(name),
                "ORBIT_BROKER_AUTH": "roles",
                "ORBIT_NAMESPACE": self.namespace,
                "ORBIT_DECIDER_PARTITIONS": str(self.partitions),
                "ORBIT_HTTP_PORT": str(self.gateway_ports.get(name, self.http_port)),
                "ORBIT_LOG_LEVEL": "WARNING",
                # Auth stays on (its cost is part of every request); counters.py
                # scrapes /metrics, so the gateway serves it without a token.
                "ORBIT_METRICS_PUBLIC": "true",
                # L2 holds up to 10,000 clients waiting on one gateway, each a busy
                # connection: above the default cap (docs/operations.md).
                "ORBIT_HTTP_MAX_CONNECTIONS": str(L2_CONNECTIONS),
                "BENCH_WORKER_CONCURRENCY": str(self.worker_concurrency),
                "PYTHONPATH": str(ROOT),
            }
        )
        if name != "worker":
            env.update(self.service_env)
        if name.startswith("decider") and self.decider_batch_size is not None:
            env["ORBIT_DECIDER_BATCH_SIZE"] = str(self.decider_batch_size)
        if name == "worker":
            env["BENCH_WORKER_METRICS_PORT"] = str(self.metrics_ports[name])
        elif name not in self.gateway_ports:
            env["ORBIT_METRICS_PORT"] = str(self.metrics_ports[name])
        return env

    async def _spawn(self, name: str, *args: str) -> Proc:
        self.log_dir.mkdir(parents=True, exist_ok=True)
        log_path = self.log_dir / f"{name}.log"
        log = log_path.open("wb")
        process = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "orbit_sdk",
            *args,
            env=self._env(name),
            cwd=str(ROOT),
            stdout=log,
            stderr=asyncio.subprocess.STDOUT,
            stdin=asyncio.subprocess.DEVNULL,
        )
        proc = Proc(name, process, log_path, log)
        self.procs[name] = proc
        return proc

    def check_alive(self) -> None:
        for proc in self.procs.values():
            if proc.process.returncode is not None:
                raise RuntimeError(
                    f"{proc.name} (pid {proc.pid}) exited with {proc.process.returncode};"
                    f" its log ({proc.log_path}):\n{proc.tail()}"
                )

    async def _start(self) -> None:
        self.say(f"database {self.database}, namespace {self.namespace}")
        await migrate(self.settings.database_url)
        await self._make_token()
        self._users_made = True  # from here on, close() removes whatever was made
        self.roles = await provision_local_roles(self.settings, "bench")
        self.say(f"RabbitMQ users {self.namespace}.<role>, .worker.bench, .client.bench made")
        for name in self.services:
            await self._spawn(name, "service", name.partition("-")[0])
        for port in self.gateway_ports.values():
            await self._wait_gateway(port)
        self.say(f"services up: {', '.join(f'{p.name}={p.pid}' for p in self.procs.values())}")
        for name, text in {**workflows.DEFINITIONS, **self.definitions}.items():
            await self.client.deploy(text)
            self.say(f"  deployed {name}")
        await self._spawn("worker", "worker", "bench.tasks:worker")
        await self._wait_consumers()
        self.say(f"worker up: pid {self.procs['worker'].pid}")

    async def restart(self, name: str) -> Proc:
        """Stop service ``name`` (SIGTERM: it hands its work over) and start it afresh, so
        what it measures next owes nothing to what it held before; back once every
        engine queue has a consumer again."""
        old = self.procs[name]
        old.process.send_signal(signal.SIGTERM)
        await asyncio.wait_for(old.process.wait(), 30)
        old.log.close()
        self.log_dir.joinpath(f"{name}.log").rename(self.log_dir / f"{name}.{old.pid}.log")
        proc = await self._spawn(name, "service", name.partition("-")[0])
        await self._wait_consumers()
        return proc

    async def _make_token(self) -> None:
        """An admin token for the bench's client, made on the database as an operator would."""
        store = await EventStore.connect(self.settings.database_url, min_size=1, max_size=1)
        try:
            _, token = await store.tokens.create("bench", frozenset({TokenScope.ADMIN}))
        finally:
            await store.close()
        await self.client.close()
        self.token = token  # the bench's own HTTP load (bench/client_path.py) sends it too
        self.client = OrbitClient(f"http://127.0.0.1:{self.http_port}", timeout=60.0, token=token)

    async def _wait_gateway(self, port: int, timeout: float = 60.0) -> None:
        deadline = time.monotonic() + timeout
        async with httpx.AsyncClient() as http:
            while True:
                self.check_alive()
                try:
                    response = await http.get(f"http://127.0.0.1:{port}/readyz")
                    if response.status_code == 200:
                        return
                except httpx.TransportError:
                    pass
                if time.monotonic() > deadline:
                    raise RuntimeError("the gateway did not come up within 60 s")
                await asyncio.sleep(0.2)

    async def queue_counts(self, names: list[str]) -> dict[str, tuple[int, int]]:
        """``{queue: (ready messages, consumers)}`` by passive declares (no management plugin)."""
        connection = await aio_pika.connect(self.amqp_url)
        try:
            counts = {}
            for name in names:
                channel = await connection.channel()
                queue = await channel.declare_queue(name, passive=True)
                result = queue.declaration_result
                counts[name] = (result.message_count or 0, result.consumer_count or 0)
                await channel.close()
            return counts
        finally:
            await connection.close()

    def engine_queues(self) -> list[str]:
        t = self.topology
        return [
            t.commands,
            t.control,
            *(t.decider_queue(p) for p in range(t.partitions)),
            *(t.task_queue(task, version) for task, version in workflows.TASKS),
        ]

    async def _wait_consumers(self, timeout: float = 60.0) -> None:
        """Until every engine queue has a consumer (decider partitions, control, tasks…)."""
        deadline = time.monotonic() + timeout
        while True:
            self.check_alive()
            try:
                counts = await self.queue_counts(self.engine_queues())
                if all(consumers >= 1 for _, consumers in counts.values()):
                    return
            except aio_pika.exceptions.ChannelClosed:
                pass  # a task queue not declared yet
            if time.monotonic() > deadline:
                raise RuntimeError("the services and worker did not all consume within 60 s")
            await asyncio.sleep(0.2)

    async def close(self) -> None:
        await self.client.close()
        # The worker first (it unregisters through the dispatcher), then the services.
        for proc in reversed(list(self.procs.values())):
            if proc.process.returncode is None:
                proc.process.send_signal(signal.SIGTERM)
            try:
                await asyncio.wait_for(proc.process.wait(), 20)
            except TimeoutError:
                self.say(f"{proc.name} (pid {proc.pid}) did not stop in 20 s: SIGKILL")
                proc.process.kill()
                await proc.process.wait()
            proc.log.close()
        # Every step of the clean-up is tried; the first failure is raised after them all.
        failure: BaseException | None = None
        for step in (self._delete_namespace, self._remove_users, self._drop_database):
            try:
                await step()
            except Exception as error:  # reported, then the first one raised below
                self.say(f"clean-up {step.__name__} failed: {error!r}")
                failure = failure or error
        if failure is not None:
            raise failure
        self.say(f"dropped {self.database}, deleted namespace {self.namespace} and its users")

    async def _remove_users(self) -> None:
        """Delete the namespace's RabbitMQ users and queue policy (management API)."""
        if not self._users_made:
            return
        async with BrokerAdmin.from_settings(self.settings) as admin:
            await remove_namespace(admin, self.topology)

    async def _delete_namespace(self) -> None:
        t = self.topology
        connection = await aio_pika.connect(self.amqp_url)
        try:
            channel = await connection.channel()
            # The topology's own lists: a queue or exchange added to Orbit is removed too.
            tasks = [t.task_queue(task, version) for task, version in workflows.TASKS]
            for queue in [*t.fixed_queues(), *tasks, f"{self.namespace}.bench-limit"]:
                await channel.queue_delete(queue)
            for exchange in t.exchanges():
                await channel.exchange_delete(exchange)
        finally:
            await connection.close()

    async def _drop_database(self) -> None:
        admin = await asyncpg.connect(_with_database(self.server_url, "postgres"))
        try:
            await admin.execute(f'DROP DATABASE IF EXISTS "{self.database}" WITH (FORCE)')
        finally:
            await admin.close()
