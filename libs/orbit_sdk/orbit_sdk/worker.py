"""The worker: serves task functions from their RabbitMQ queues.

A worker registers with the dispatcher (announcing each task's contract),
consumes the queue of every task it serves, runs each assignment, publishes
its :class:`~orbit_model.messages.TaskResult` to the assignment's
``result_route`` with a confirm and only then acks the assignment, so a
crash at any point leaves the task in its queue for another worker. At most
``concurrency`` tasks run at once. Heartbeats report the tasks in flight
and bring back the tokens to cancel.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from aio_pika.abc import (
    AbstractChannel,
    AbstractIncomingMessage,
    AbstractQueue,
    AbstractRobustConnection,
    ConsumerTag,
)

from orbit_model.errors import ErrorCode, OrbitError
from orbit_model.events import TaskFailure
from orbit_model.messages import (
    InflightTask,
    MalformedMessage,
    RegisterWorker,
    Registration,
    TaskAssignment,
    TaskResult,
    decode_assignment,
    encode,
)
from orbit_model.topology import Topology
from orbit_sdk import lifecycle
from orbit_sdk.amqp import Publisher, connect, open_channel, translated
from orbit_sdk.lifecycle import run_until_stopped
from orbit_sdk.logs import LogThrottle
from orbit_sdk.rpc import Requester
from orbit_sdk.running import (
    RESULT_PATIENCE_SECONDS,
    PendingHeartbeat,
    Running,
    epoch_ms,
    publish_result,
    sdk_version,
    settle,
    still_wanted,
)
from orbit_sdk.session import ControlSession
from orbit_sdk.settings import ClientSettings, load_client_settings
from orbit_sdk.tasks import TASK_FAILED, TaskContext, TaskDefinition, TaskOutcome, task_definition

if TYPE_CHECKING:
    from orbit_sdk.tracing import WorkerTracing

log = logging.getLogger("orbit.worker")

_CANCELLED_ITSELF = TaskFailure(
    code=TASK_FAILED, message="CancelledError: the task was cancelled", retryable=True
)


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
        self.settings = settings or load_client_settings("worker")
        self.topology = Topology(self.settings.namespace, self.settings.decider_partitions)
        self.register_timeout = register_timeout
        self.stop_timeout = stop_timeout
        self._connection: AbstractRobustConnection | None = None
        self._session: ControlSession | None = None
        self._results: Publisher | None = None
        self._consumers: list[tuple[AbstractQueue, ConsumerTag]] = []
        self._slots = asyncio.Semaphore(concurrency)
        self._running: dict[str, Running] = {}
        self._handlers: set[asyncio.Task[Any]] = set()
        self._interval = self.settings.heartbeat_interval_ms / 1000
        self._heartbeats: asyncio.Task[None] | None = None
        self._pending: PendingHeartbeat | None = None
        self._stop_requested = asyncio.Event()
        self._stopping = False
        self._shutdown: asyncio.Task[None] | None = None
        self._tracing: WorkerTracing | None = None
        self._failures = LogThrottle(log)
        if self.settings.otlp_endpoint:
            # Imported only when traces are exported: OpenTelemetry is the otel extra.
            from orbit_sdk.tracing import WorkerTracing  # noqa: PLC0415

            self._tracing = WorkerTracing(self.settings.otlp_endpoint, self.worker_id)

    @property
    def session_id(self) -> str | None:
        """The session of the current registration; None before it and after stopping."""
        return None if self._session is None else self._session.session_id

    @property
    def warnings(self) -> tuple[str, ...]:
        """What the dispatcher warned about at registration (contract versions no workflow uses)."""
        registration = None if self._session is None else self._session.registration
        return () if registration is None else registration.warnings

    # -- lifecycle --------------------------------------------------------------

    async def start(self) -> None:
        """Connect, register, start consuming and heartbeating; return once serving.

        Raises:
            OrbitError: ``UNAVAILABLE`` if RabbitMQ or the dispatcher does not
                answer; the dispatcher's code (``INVALID_REQUEST``,
                ``RESERVED_TASK``) if it refuses the registration.
        """
        # AMQP heartbeats of half the session timeout: if this process freezes, the
        # broker drops its connection and hands the tasks it holds to other workers,
        # including the redeliveries the engine sent after the session expired.
        heartbeat = max(1, round(self.settings.session_timeout_ms / 2000))
        self._connection = connection = await connect(self.settings.amqp_url, heartbeat)
        try:
            requester = Requester(await open_channel(connection))
            await requester.start()
            self._session = ControlSession(
                requester, self.topology, self._registration(), self.register_timeout
            )
            registration = await self._session.register()
            self._interval = registration.heartbeat_interval_ms / 1000
            # Results go out on their own channel: a failed publish closes its
            # channel, and that must not take the unacked assignments with it.
            self._results = Publisher(await open_channel(connection))
            tasks_channel = await open_channel(connection, prefetch=self.concurrency)
            await self._consume(tasks_channel, registration)
        except BaseException:
            await connection.close()
            self._connection = None
            raise
        self._heartbeats = asyncio.create_task(self._heartbeat_loop())

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
        self._stopping = True
        for queue, tag in self._consumers:
            try:
                # Bounded: while the broker is away, a robust queue waits for it.
                async with asyncio.timeout(self.register_timeout):
                    await queue.cancel(tag)
            except Exception as error:
                log.warning("cancelling the consumer of %s failed: %r", queue.name, error)
        self._consumers = []
        runs = [r.run for r in self._running.values() if r.run is not None]
        if runs:
            _, late = await asyncio.wait(runs, timeout=self.stop_timeout)
            for running in list(self._running.values()):
                if running.run in late:
                    running.abandoned = True
                    running.run.cancel()
        if self._handlers:
            # Finished runs may still be publishing their results (the broker may be
            # away): given their time, then cancelled, so nothing outlives the stop.
            patience = max(self.register_timeout, RESULT_PATIENCE_SECONDS + 1)
            _, left = await asyncio.wait(list(self._handlers), timeout=patience)
            for handler in left:
                handler.cancel()
            await asyncio.gather(*left, return_exceptions=True)
        if self._heartbeats is not None:
            self._heartbeats.cancel()
            await asyncio.gather(self._heartbeats, return_exceptions=True)
        if self._session is not None:
            await self._session.leave()
        if self._connection is not None:
            await self._connection.close()
            self._connection = None
        if self._tracing is not None:
            with contextlib.suppress(Exception):
                await asyncio.to_thread(self._tracing.shutdown)

    # -- control ----------------------------------------------------------------

    def _registration(self) -> RegisterWorker:
        return RegisterWorker(
            worker_id=self.worker_id,
            runtime="python",
            sdk=sdk_version(),
            contracts=tuple(definition.contract for definition in self._tasks.values()),
        )

    async def _consume(self, channel: AbstractChannel, registration: Registration) -> None:
        for key in self._tasks:
            name = registration.task_queues.get(key)
            if name is None:
                raise OrbitError(ErrorCode.UNAVAILABLE, f"the dispatcher gave no queue for {key}")
            # Passive: the dispatcher declared it; a robust channel re-consumes
            # queues declared through it after a reconnect.
            with translated(f"consuming the task queue {name!r}"):
                queue = await channel.declare_queue(name, passive=True)
                self._consumers.append((queue, await queue.consume(self._on_task)))

    async def _heartbeat_loop(self) -> None:
        while True:
            await asyncio.sleep(self._interval)
            await self._heartbeat()

    async def _heartbeat(self, token: str | None = None) -> None:
        """Send a heartbeat, or join the one in flight if it already reports ``token``."""
        pending = self._pending
        if pending is not None and not pending.task.done():
            if token is None or token in pending.tokens:
                await asyncio.shield(pending.task)
                return
            await asyncio.shield(pending.task)
        pending = PendingHeartbeat(
            asyncio.create_task(self._send_heartbeat()), frozenset(self._running)
        )
        self._pending = pending
        await asyncio.shield(pending.task)

    async def _send_heartbeat(self) -> None:
        # Heartbeats go on while a stopping worker lets its tasks finish: a silent
        # session would expire and its tasks would run a second time elsewhere.
        if self._session is None:
            return
        inflight = [
            InflightTask(
                execution_id=r.assignment.execution_id, token=token, heartbeat_at=r.heartbeat_at
            )
            for token, r in self._running.items()
        ]
        try:
            cancel = await self._session.heartbeat(inflight)
        except Exception as error:
            self._failures.log(
                logging.WARNING,
                "heartbeat",
                "heartbeat failed: %r",
                error,
                extra={"action": "worker.heartbeat_failed"},
            )
            return
        for token in cancel:
            running = self._running.get(token)
            if running is not None:
                running.context.cancelled.set()

    # -- tasks ------------------------------------------------------------------

    async def _on_task(self, message: AbstractIncomingMessage) -> None:
        # The task runs in a task of the worker's own, not in the consumer callback's:
        # aiormq cancels those when their channel closes (a lost connection), and a
        # task that finished meanwhile would lose its result and run again.
        handler = asyncio.create_task(self._handle(message))
        self._handlers.add(handler)
        handler.add_done_callback(self._handled)

    def _handled(self, handler: asyncio.Task[None]) -> None:
        self._handlers.discard(handler)
        if not handler.cancelled() and handler.exception() is not None:
            log.error(
                "handling a task message failed; the broker redelivers it",
                exc_info=handler.exception(),
                extra={"action": "task.handler_failed"},
            )

    async def _handle(self, message: AbstractIncomingMessage) -> None:
        if self._stopping:
            await settle(message.nack(requeue=True))
            return
        try:
            assignment = decode_assignment(message.body)
        except MalformedMessage as error:
            log.error(
                "rejecting a malformed task assignment from %s: %s",
                message.routing_key,
                error.message,
                extra={"action": "task.malformed", "routing_key": message.routing_key},
            )
            await settle(message.reject(requeue=False))
            return
        definition = self._tasks.get(f"{assignment.task}@{assignment.task_version}")
        if definition is None:
            log.error(
                "rejecting an assignment of %s@%s, which this worker does not serve",
                assignment.task,
                assignment.task_version,
                extra={"action": "task.unknown", "execution_id": assignment.execution_id},
            )
            await settle(message.reject(requeue=False))
            return
        if self._held_already(assignment, message):
            return
        async with self._slots:
            if self._stopping:
                await settle(message.nack(requeue=True))
                return
            if self._held_already(assignment, message):  # came while waiting for a slot
                return
            await self._execute(message, assignment, definition)

    def _held_already(self, assignment: TaskAssignment, message: AbstractIncomingMessage) -> bool:
        """Whether this worker holds the delivery already (its run's result is being
        published after a lost connection, or the message was published twice): the
        copy is then settled with that run, not run again."""
        held = self._running.get(assignment.token)
        if held is None:
            return False
        held.messages.append(message)
        return True

    async def _execute(
        self,
        message: AbstractIncomingMessage,
        assignment: TaskAssignment,
        definition: TaskDefinition,
    ) -> None:
        token = assignment.token

        async def heartbeat() -> None:
            running.heartbeat_at = epoch_ms()
            await self._heartbeat(token)

        context = TaskContext(
            execution_id=assignment.execution_id,
            idempotency_key=assignment.idempotency_key,
            attempt=assignment.attempt,
            # A message the broker delivers again may have run elsewhere already.
            redelivery=assignment.redelivery or bool(message.redelivered),
            token=token,
            unit=assignment.unit,
            workflow=assignment.workflow,
            _send_heartbeat=heartbeat,
        )
        started_at = epoch_ms()
        running = Running(assignment, context, [message], heartbeat_at=started_at)
        self._running[token] = running
        try:
            if not await still_wanted(running, self._heartbeat):
                return
            if self._stopping:  # while it was being checked
                await running.settle(requeue=True)
                return
            with self._span(message, assignment) as current:
                outcome = await self._run(running, definition, assignment, context)
                if outcome is None:
                    await running.settle(requeue=True)
                    return
                if current is not None:
                    current.set_attribute(
                        "orbit.outcome", "succeeded" if outcome.error is None else "failed"
                    )
                    if outcome.error is not None:
                        current.set_attribute("orbit.error_code", outcome.error.code)
            result = TaskResult(
                execution_id=assignment.execution_id,
                token=token,
                output=outcome.output,
                error=outcome.error,
                worker_id=self.worker_id,
                started_at=started_at,
            )
            assert self._results is not None
            body = encode(result)
            published = await publish_result(
                self._results, assignment.result_route, body, self._failures
            )
            await running.settle(requeue=not published)
        finally:
            if self._running.get(token) is running:
                del self._running[token]

    def _span(self, message: AbstractIncomingMessage, assignment: TaskAssignment) -> Any:
        """The task's span (a child of the attempt's) when traces are exported, else nothing."""
        if self._tracing is None:
            return contextlib.nullcontext(None)
        return self._tracing.task_span(
            message.headers,
            f"task {assignment.task}",
            {
                "orbit.execution_id": assignment.execution_id,
                "orbit.workflow": assignment.workflow,
                "orbit.unit": assignment.unit,
                "orbit.task": assignment.task,
                "orbit.task_version": assignment.task_version,
                "orbit.attempt": assignment.attempt,
            },
        )

    async def _run(
        self,
        running: Running,
        definition: TaskDefinition,
        assignment: TaskAssignment,
        context: TaskContext,
    ) -> TaskOutcome | None:
        """The outcome of the task function; None when it was abandoned (to give back)."""
        running.run = asyncio.create_task(definition.run(assignment.input, context))
        try:
            return await running.run
        except asyncio.CancelledError:
            current = asyncio.current_task()
            if current is not None and current.cancelling():
                raise
            if running.abandoned:
                log.warning(
                    "giving back %s of %s",
                    assignment.unit,
                    assignment.execution_id,
                    extra={
                        "action": "task.given_back",
                        "execution_id": assignment.execution_id,
                        "step": assignment.unit,
                    },
                )
                return None
            # The function cancelled itself (or let a cancellation escape).
            return TaskOutcome(error=_CANCELLED_ITSELF)
