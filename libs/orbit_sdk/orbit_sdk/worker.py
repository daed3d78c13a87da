"""The worker: serves task functions from their RabbitMQ queues.

A worker registers with the dispatcher (announcing each task's contract),
consumes the queue of every task it serves, runs each assignment, publishes
its :class:`~orbit_model.messages.TaskResult` to the assignment's
``result_route`` with a confirm and only then acks the assignment, so a
crash at any point leaves the task in its queue for another worker. At most
``concurrency`` tasks run at once. Heartbeats report the tasks in flight
and bring back the tokens to cancel.

The class here is what a program holds and what it imports: what the worker
serves and how (its tasks, id, settings). The AMQP machinery it runs with is
:mod:`orbit_sdk.serving`, loaded when the worker starts: a module that only
defines a worker, or imports its tasks, does not load aio-pika.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from orbit_sdk import lifecycle
from orbit_sdk.lifecycle import run_until_stopped
from orbit_sdk.tasks import TaskDefinition, task_definition

if TYPE_CHECKING:
    from orbit_sdk.serving import Serving
    from orbit_sdk.settings import ClientSettings
    from orbit_sdk.tracing import WorkerTracing

log = logging.getLogger("orbit.worker")


class Worker:
    """Runs task functions for Orbit.

    Args:
        tasks: Functions decorated with :func:`~orbit_sdk.task`.
        worker_id: Names this worker in ``orbit workers``; default ``HOST-PID``.
        concurrency: Tasks run at once, at most.
        settings: Orbit settings (the AMQP URL and namespace); default from the
            environment.
        register_timeout: Seconds to wait for the dispatcher's answer to a
            control request.
        stop_timeout: Seconds :meth:`stop` lets running tasks finish before it
            cancels them and gives them back to their queues.
        runtime: What the worker tells the dispatcher it runs on (``RegisterWorker.runtime``,
            shown by ``orbit workers``). Orbit's own HTTP adapter registers as ``"orbit"``,
            the runtime that may serve built-in tasks where the broker's users cannot
            tell it apart (``ORBIT_BROKER_AUTH=shared``); the dispatcher refuses built-in
            tasks from any other worker.

    Raises:
        TypeError: A function is not a task.
        ValueError: No tasks, a task given twice, or ``concurrency`` below 1.
    """

    name = "worker"

    def __init__(
        self,
        tasks: Sequence[Callable[..., Any] | TaskDefinition],
        worker_id: str | None = None,
        concurrency: int = 16,
        settings: ClientSettings | None = None,
        *,
        register_timeout: float = 10.0,
        stop_timeout: float = 30.0,
        runtime: str = "python",
    ) -> None:
        definitions = [task_definition(fn) for fn in tasks]
        if not definitions:
            raise ValueError("a worker needs at least one task")
        self._tasks: dict[str, TaskDefinition] = {}
        for definition in definitions:
            if definition.key in self._tasks:
                raise ValueError(f"task {definition.key} is given twice")
            self._tasks[definition.key] = definition
        if concurrency < 1:
            raise ValueError("concurrency must be at least 1")
        self.worker_id = worker_id or f"{socket.gethostname()}-{os.getpid()}"
        self.concurrency = concurrency
        if settings is None:
            # Here, not at the top: pydantic-settings is loaded by a worker made, not
            # by every module that imports this one.
            from orbit_sdk.settings import load_client_settings  # noqa: PLC0415

            settings = load_client_settings("worker")
        self.settings = settings
        self.register_timeout = register_timeout
        self.stop_timeout = stop_timeout
        self.runtime = runtime
        self._serving: Serving | None = None
        self._stop_requested = asyncio.Event()
        self._shutdown: asyncio.Task[None] | None = None
        self._tracing: WorkerTracing | None = None
        if self.settings.otlp_endpoint:
            # Imported only when traces are exported: OpenTelemetry is the otel extra.
            from orbit_sdk.tracing import WorkerTracing  # noqa: PLC0415

            self._tracing = WorkerTracing(self.settings.otlp_endpoint, self.worker_id)

    @property
    def session_id(self) -> str | None:
        """The session of the current registration; None before it and after stopping."""
        session = None if self._serving is None else self._serving.session
        return None if session is None else session.session_id

    @property
    def warnings(self) -> tuple[str, ...]:
        """What the dispatcher warned about at registration (contracts no workflow calls)."""
        session = None if self._serving is None else self._serving.session
        registration = None if session is None else session.registration
        return () if registration is None else registration.warnings

    # -- lifecycle --------------------------------------------------------------

    async def start(self) -> None:
        """Connect, register, start consuming and heartbeating; return once serving.

        Raises:
            OrbitError: ``UNAVAILABLE`` if RabbitMQ or the dispatcher does not answer;
                the dispatcher's code if it refuses the registration (``TASK_NOT_PERMITTED``
                also when RabbitMQ refuses this worker's user a task's queue).
        """
        from orbit_sdk.serving import Serving  # noqa: PLC0415  (aio-pika: see the module)

        serving = Serving(self, self._tasks, self._tracing)
        self._serving = serving
        await serving.start()

    async def run(self) -> None:
        """Serve until :meth:`stop` is called (or this is cancelled), then stop."""
        await self.start()
        try:
            await self._stop_requested.wait()
        finally:
            await self.stop()

    def run_forever(self) -> None:
        """Serve until SIGTERM or SIGINT (or :meth:`stop`), then stop cleanly. Blocks."""
        lifecycle.run(run_until_stopped([self], stop=self._stop_requested))

    async def stop(self) -> None:
        """Stop taking tasks, let running ones finish, give back the rest, unregister.

        Tasks still running after ``stop_timeout`` are cancelled and requeued
        for another worker; results still being published (the broker away) get
        up to :data:`~orbit_sdk.running.RESULT_PATIENCE_SECONDS` more. Calling it
        again waits for the first call.
        """
        self._stop_requested.set()
        if self._shutdown is None:
            self._shutdown = asyncio.create_task(self._stop())
        await asyncio.shield(self._shutdown)

    async def _stop(self) -> None:
        if self._serving is not None:
            await self._serving.stop()
        if self._tracing is not None:
            with contextlib.suppress(Exception):
                await asyncio.to_thread(self._tracing.shutdown)
