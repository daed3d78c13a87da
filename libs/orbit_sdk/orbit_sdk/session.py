"""A worker's session with the dispatcher: register, heartbeat, unregister.

Each is a request on the ``NS.control`` exchange (routing key ``control``)
answered on direct reply-to; see :mod:`orbit_sdk.rpc`.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator, Sequence

import aiormq
from aio_pika.abc import AbstractRobustConnection

from orbit_model.errors import ErrorCode, OrbitError
from orbit_model.messages import (
    ControlError,
    ControlReply,
    Heartbeat,
    HeartbeatReply,
    InflightTask,
    RegisterWorker,
    Registration,
    UnregisterWorker,
    decode_control_reply,
    encode,
)
from orbit_model.topology import CONTROL_KEY, Topology
from orbit_sdk.amqp import open_channel, translated
from orbit_sdk.rpc import ReplyTimeout, Requester

log = logging.getLogger("orbit.worker")


def connection_heartbeat(session_timeout_ms: int) -> int:
    """The AMQP heartbeat, in whole seconds, of a worker whose session times out after
    ``session_timeout_ms``: half of it (at least 1 s), so that RabbitMQ drops a frozen
    worker's connection, and hands its tasks to others, before its session expires."""
    return max(1, session_timeout_ms // 2000)


async def requester_on(connection: AbstractRobustConnection) -> Requester:
    """A requester on a new channel of ``connection``, consuming its replies."""
    requester = Requester(await open_channel(connection))
    await requester.start()
    return requester


@contextlib.contextmanager
def consuming(queue: str, key: str) -> Iterator[None]:
    """Consuming the task queue ``queue`` of the contract ``key``: a refusal by RabbitMQ
    (the worker's user may not read it) is ``TASK_NOT_PERMITTED``, what else fails
    ``UNAVAILABLE``. The dispatcher refuses such a contract at registration when it
    knows the user's patterns; this says so clearly when it does not."""
    try:
        with translated(f"consuming the task queue {queue!r}"):
            yield
    except OrbitError as error:
        if not isinstance(error.__cause__, aiormq.exceptions.ChannelAccessRefused):
            raise
        raise OrbitError(
            ErrorCode.TASK_NOT_PERMITTED,
            f"RabbitMQ refused to let this worker's user consume {queue!r} (ACCESS_REFUSED):"
            f" its --tasks patterns do not cover {key}; serve it as a worker user whose"
            " patterns do (`orbit broker user add --role worker --tasks PATTERN NAME`)",
        ) from error.__cause__


def say_short_timeout(registration: Registration, own_timeout_ms: int) -> None:
    log.warning(
        "the services' session timeout is %d ms, this worker's ORBIT_SESSION_TIMEOUT_MS"
        " %d: connecting again with AMQP heartbeats of %d s (set it as the services do"
        " to save this)",
        registration.session_timeout_ms,
        own_timeout_ms,
        connection_heartbeat(registration.session_timeout_ms),
        extra={"action": "worker.reconnect_heartbeat"},
    )


def control_failure(reply: ControlError) -> OrbitError:
    """The dispatcher's error answer as an :class:`OrbitError` with its code."""
    try:
        code = ErrorCode(reply.error.code)
    except ValueError:
        code = ErrorCode.INVALID_REQUEST
    return OrbitError(code, reply.error.message)


class ControlSession:
    """Registers ``request`` and keeps its session.

    Args:
        requester: Sends requests and matches their answers.
        topology: Names the control exchange.
        request: The registration to send (again, if the session expires).
        timeout: Seconds to wait for each answer.
    """

    def __init__(
        self, requester: Requester, topology: Topology, request: RegisterWorker, timeout: float
    ) -> None:
        self.requester = requester
        """Sends requests; may be replaced (a new connection) while the session lives."""
        self._topology = topology
        self._request = request
        self._timeout = timeout
        self.session_id: str | None = None
        self.registration: Registration | None = None

    async def _send(self, request: RegisterWorker | Heartbeat | UnregisterWorker) -> ControlReply:
        body = await self.requester.request(
            self._topology.control, CONTROL_KEY, encode(request), self._timeout
        )
        return decode_control_reply(body)

    async def register(self) -> Registration:
        """Open a session.

        Raises:
            OrbitError: ``UNAVAILABLE`` when no dispatcher answers; the
                dispatcher's code when it refuses the registration.
        """
        try:
            reply = await self._send(self._request)
        except ReplyTimeout:
            raise OrbitError(
                ErrorCode.UNAVAILABLE,
                f"no dispatcher answered on {self._topology.control!r} within"
                f" {self._timeout:g}s: is the dispatcher running?",
            ) from None
        if isinstance(reply, ControlError):
            raise control_failure(reply)
        if not isinstance(reply, Registration):
            raise OrbitError(ErrorCode.UNAVAILABLE, f"unexpected answer to a registration: {reply}")
        self.session_id = reply.session_id
        self.registration = reply
        for warning in reply.warnings:
            log.warning(warning, extra={"action": "worker.contract_unused"})
        log.info(
            "worker %s registered (session %s)",
            self._request.worker_id,
            reply.session_id,
            extra={"action": "worker.registered", "session_id": reply.session_id},
        )
        return reply

    async def heartbeat(self, inflight: Sequence[InflightTask]) -> tuple[str, ...]:
        """Report the tasks held; the tokens among them the engine wants stopped.

        A session the dispatcher no longer knows (it expired) is registered
        again; the tasks held are reported with the next heartbeat.

        Raises:
            OrbitError: No answer, or an error other than ``UNKNOWN_SESSION``.
        """
        if self.session_id is None:
            raise OrbitError(ErrorCode.UNKNOWN_SESSION, "not registered")
        reply = await self._send(Heartbeat(session_id=self.session_id, inflight=tuple(inflight)))
        if isinstance(reply, HeartbeatReply):
            return reply.cancel
        if isinstance(reply, ControlError) and reply.error.code == ErrorCode.UNKNOWN_SESSION:
            log.warning("the worker session expired; registering again")
            await self.register()
            return ()
        if isinstance(reply, ControlError):
            raise control_failure(reply)
        raise OrbitError(ErrorCode.UNAVAILABLE, f"unexpected answer to a heartbeat: {reply}")

    async def leave(self) -> None:
        """Close the session, holding nothing; a failure is logged (the session will expire)."""
        if self.session_id is None:
            return
        try:
            # Whatever the worker held went back to its queues, so say the
            # session holds nothing first: else the tasks of the last
            # heartbeat would be reported lost and run twice.
            await self._send(Heartbeat(session_id=self.session_id, inflight=()))
            reply = await self._send(UnregisterWorker(session_id=self.session_id))
            if isinstance(reply, ControlError):
                raise control_failure(reply)
        except Exception as error:
            log.warning("unregistering failed, the session will expire: %r", error)
        self.session_id = None
