"""The HTTP adapter service: performs the ``http:`` steps of workflows.

It is an SDK :class:`~orbit_sdk.Worker` of runtime ``orbit`` serving the
built-in task ``orbit.http.request`` version ``1``, which the dispatcher lets
only Orbit's own runtime register. Each assignment is one request made by
:class:`~orbit_services.http_adapter.adapter.HttpAdapter` over one shared aiohttp
session, at most ``ORBIT_HTTP_ADAPTER_CONCURRENCY`` at once. A failure keeps
its ``HTTP_…`` code and retryable flag, so step retry policies apply as to any
task.

While a request runs the adapter heartbeats for it (so a step's
``heartbeat_timeout`` means "the adapter is gone"), and a stop request from
the engine (the attempt timed out, the execution was cancelled) aborts it.

The service only serves when ``ORBIT_HTTP_ADAPTER_ENABLED`` is true: with it
false the decider fails http steps at once with ``ADAPTER_DISABLED`` and
dispatches none, so ``orbit dev`` can always list it.
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
from collections.abc import Awaitable
from typing import TypeVar

from orbit_model.broker_roles import Role
from orbit_model.ir import HTTP_CONTRACT_VERSION, HTTP_TASK
from orbit_model.names import BUILTIN_RUNTIME
from orbit_model.outcome_codes import OutcomeCode
from orbit_sdk.tasks import TaskContext, TaskDefinition, TaskError
from orbit_sdk.worker import Worker
from orbit_services.http_adapter.adapter import HttpAdapter, HttpRequest, HttpResponse
from orbit_services.runtime.host import Host
from orbit_services.runtime.metrics import MetricsEndpoint
from orbit_services.runtime.senders import check_identity
from orbit_services.runtime.settings import Settings

log = logging.getLogger("orbit.http")

T = TypeVar("T")


def adapter_worker_id() -> str:
    return f"orbit-http-adapter-{socket.gethostname()}-{os.getpid()}"


async def _while_wanted(work: Awaitable[T], ctx: TaskContext, heartbeat_s: float) -> T:
    """``work``'s result, heartbeating while it runs; aborted if the engine asks to stop."""
    running = asyncio.ensure_future(work)
    stopped = asyncio.ensure_future(ctx.cancelled.wait())
    try:
        while True:
            done, _ = await asyncio.wait(
                {running, stopped}, timeout=heartbeat_s, return_when=asyncio.FIRST_COMPLETED
            )
            if running in done:
                return running.result()
            if stopped in done:
                raise TaskError(
                    OutcomeCode.CANCELLED, "the engine stopped this request", retryable=False
                )
            await ctx.heartbeat()
    finally:
        for future in (running, stopped):
            future.cancel()
        await asyncio.gather(running, stopped, return_exceptions=True)


def http_task(adapter: HttpAdapter, heartbeat_s: float = 5.0) -> TaskDefinition:
    """The built-in task ``orbit.http.request@1``, made by ``adapter``."""

    async def request(inp: HttpRequest, ctx: TaskContext) -> HttpResponse:
        # A failed request raises HttpStepError, a TaskError: the attempt fails with its code.
        return await _while_wanted(adapter.request(inp), ctx, heartbeat_s)

    return TaskDefinition(
        name=HTTP_TASK,
        version=HTTP_CONTRACT_VERSION,
        fn=request,
        input_model=HttpRequest,
        output_model=HttpResponse,
        takes_context=True,
    )


class HttpAdapterService:
    name = "http-adapter"

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.adapter = HttpAdapter.from_settings(settings)
        self.worker: Worker | None = None
        self._host = Host(self.name)
        self._metrics = MetricsEndpoint(settings.metrics_port, settings.http_host)

    async def start(self) -> None:
        """Serve ``orbit.http.request`` (if enabled); return once registered.

        Raises:
            OrbitError: ``UNAVAILABLE`` when RabbitMQ cannot be reached (nothing is left open).
        """
        await self._host.start(self._start)

    async def _start(self, host: Host) -> None:
        self._metrics.start()
        host.on_stop("metrics", self._metrics.stop)
        if not self.settings.http_adapter_enabled:
            log.warning(
                "the HTTP adapter serves no http steps while ORBIT_HTTP_ADAPTER_ENABLED is false",
                extra={"action": "http.disabled"},
            )
            return
        check_identity(self.settings, Role.HTTP_ADAPTER)
        await self.adapter.open()
        host.on_stop("the HTTP session", self.adapter.close)
        worker = Worker(
            [http_task(self.adapter, self.settings.heartbeat_interval_ms / 1000)],
            worker_id=adapter_worker_id(),
            concurrency=self.settings.http_adapter_concurrency,
            settings=self.settings,
            # Orbit's own runtime, which may serve built-in tasks.
            runtime=BUILTIN_RUNTIME,
        )
        await worker.start()  # a worker whose start fails closes what it opened
        self.worker = worker
        host.on_stop("the worker", self._stop_worker)

    async def _stop_worker(self) -> None:
        worker, self.worker = self.worker, None
        if worker is not None:
            await worker.stop()

    async def stop(self) -> None:
        """Finish the requests in hand (or give them back), unregister, close."""
        await self._host.stop()
