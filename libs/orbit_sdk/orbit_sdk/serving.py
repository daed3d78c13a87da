"""A worker while it serves: its connection, its session with the dispatcher, the
consumers of its task queues and the tasks it holds.

:class:`~orbit_sdk.worker.Worker` makes a :class:`Serving` when it starts, so a
module that imports ``Worker`` (to define a worker it runs later, or only its
tasks) loads neither aio-pika nor the messages' models until then.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
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
    MalformedMessage,
    RegisterWorker,
    Registration,
    TaskAssignment,
    TaskResult,
    decode_assignment,
    encode,
)
from orbit_model.topology import Topology
from orbit_sdk import session as control
from orbit_sdk.amqp import Publisher, connect, heartbeat_in_url, open_channel
from orbit_sdk.clock import epoch_ms
from orbit_sdk.logs import LogThrottle
from orbit_sdk.running import (
    RESULT_PATIENCE_SECONDS,
    PendingHeartbeat,
    Running,
    publish_result,
    sdk_version,
    settle_task,
    still_wanted,
)
from orbit_sdk.tasks import TASK_FAILED, TaskContext, TaskDefinition, TaskOutcome

if TYPE_CHECKING:
    from orbit_sdk.tracing import WorkerTracing
    from orbit_sdk.worker import Worker

log = logging.getLogger("orbit.worker")

_CANCELLED_ITSELF = TaskFailure(
    code=TASK_FAILED, message="CancelledError: the task was cancelled", retryable=True
)


class Serving:
    """One start of ``worker`` until it stops: :meth:`start`, then :meth:`stop` once.

    Args:
        worker: What it serves, and with which settings.
        tasks: The worker's tasks by ``task@version``.
        tracing: Where the tasks' spans go; None when traces are not exported.
    """

    def __init__(
        self,
        worker: Worker,
        tasks: dict[str, TaskDefinition],
        tracing: WorkerTracing | None,
    ) -> None:
        self.worker = worker
        self.settings = worker.settings
        self.topology = Topology(self.settings.namespace, self.settings.decider_partitions)
        self._tasks = tasks
        self._tracing = tracing
        self._connection: AbstractRobustConnection | None = None
        self._session: control.ControlSession | None = None
        self._results: Publisher | None = None
        self._consumers: list[tuple[AbstractQueue, ConsumerTag]] = []
        self._slots = asyncio.Semaphore(worker.concurrency)
        self._running: dict[str, Running] = {}
        self._handlers: set[asyncio.Task[Any]] = set()
        self._interval = self.settings.heartbeat_interval_ms / 1000
        self._heartbeats: asyncio.Task[None] | None = None
        self._pending: PendingHeartbeat | None = None
        self._stopping = False
        self._failures = LogThrottle(log)

    @property
    def session(self) -> control.ControlSession | None:
        """The session with the dispatcher; None before registering and after stopping."""
        return self._session

    async def start(self) -> None:
        """Connect, register, start consuming and heartbeating; return once serving.

        Raises:
            OrbitError: ``UNAVAILABLE`` if RabbitMQ or the dispatcher does not answer;
                the dispatcher's code if it refuses the registration (``TASK_NOT_PERMITTED``
                also when RabbitMQ refuses this worker's user a task's queue).
        """
        # AMQP heartbeats of half the session timeout: if this process freezes, the
        # broker drops its connection and hands the tasks it holds to other workers,
        # including the redeliveries the engine sent after the session expired.
        heartbeat = control.connection_heartbeat(self.settings.session_timeout_ms)
        self._connection = await connect(self.settings.amqp_url, heartbeat)
        try:
            registration = await self._register(heartbeat)
            self._interval = registration.heartbeat_interval_ms / 1000
            connection = self._connection
            # Results go out on their own channel: a failed publish closes its
            # channel, and that must not take the unacked assignments with it.
            self._results = Publisher(await open_channel(connection))
            tasks_channel = await open_channel(connection, prefetch=self.worker.concurrency)
            await self._consume(tasks_channel, registration)
        except BaseException:
            await self._connection.close()
            self._connection = None
            raise
        self._heartbeats = asyncio.create_task(self._heartbeat_loop())

    async def stop(self) -> None:
        """Stop taking tasks, let running ones finish (``stop_timeout``), give back the
        rest, unregister and close the connection."""
        self._stopping = True
        for queue, tag in self._consumers:
            try:
                # Bounded: while the broker is away, a robust queue waits for it.
                async with asyncio.timeout(self.worker.register_timeout):
                    await queue.cancel(tag)
            except Exception as error:
                log.warning("cancelling the consumer of %s failed: %r", queue.name, error)
        self._consumers = []
        runs = [r.run for r in self._running.values() if r.run is not None]
        if runs:
            _, late = await asyncio.wait(runs, timeout=self.worker.stop_timeout)
            for running in list(self._running.values()):
                if running.run in late:
                    running.abandoned = True
                    running.run.cancel()
        if self._handlers:
            # Finished runs may still be publishing their results (the broker may be
            # away): given their time, then cancelled, so nothing outlives the stop.
            patience = max(self.worker.register_timeout, RESULT_PATIENCE_SECONDS + 1)
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

    # -- control ----------------------------------------------------------------

    async def _register(self, heartbeat: int) -> Registration:
        """Register over ``self._connection`` (AMQP heartbeats of ``heartbeat`` s). The
        session timeout that counts is the services', learnt only now: if half of it
        is shorter, connect again with that (the session is not tied to a connection)."""
        assert self._connection is not None
        self._session = control.ControlSession(
            await control.requester_on(self._connection),
            self.topology,
            self._registration(),
            self.worker.register_timeout,
        )
        registration = await self._session.register()
        wanted = control.connection_heartbeat(registration.session_timeout_ms)
        if wanted < heartbeat and not heartbeat_in_url(self.settings.amqp_url):
            control.say_short_timeout(registration, self.settings.session_timeout_ms)
            await self._connection.close()
            self._connection = await connect(self.settings.amqp_url, wanted)
            self._session.requester = await control.requester_on(self._connection)
        return registration

    def _registration(self) -> RegisterWorker:
        return RegisterWorker(
            worker_id=self.worker.worker_id,
            runtime=self.worker.runtime,
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
            with control.consuming(name, key):
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
        now = epoch_ms()
        inflight = [running.inflight(token, now) for token, running in self._running.items()]
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
            await settle_task(message.nack(requeue=True))
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
            await settle_task(message.reject(requeue=False))
            return
        definition = self._tasks.get(f"{assignment.task}@{assignment.task_version}")
        if definition is None:
            log.error(
                "rejecting an assignment of %s@%s, which this worker does not serve",
                assignment.task,
                assignment.task_version,
                extra={"action": "task.unknown", "execution_id": assignment.execution_id},
            )
            await settle_task(message.reject(requeue=False))
            return
        if self._held_already(assignment, message):
            return
        async with self._slots:
            if self._stopping:
                await settle_task(message.nack(requeue=True))
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
                worker_id=self.worker.worker_id,
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
