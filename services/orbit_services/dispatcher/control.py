"""The dispatcher's rules: how worker control is answered.

(Tasks do not pass through the dispatcher: the decider publishes each
:class:`~orbit_model.messages.TaskAssignment` to its contract's queue itself,
through its outbox.)

Worker control is request and reply (:class:`ControlHandler`): a
registration is checked, recorded and answered with the queues to consume; a
heartbeat records what the worker holds and is answered with the tokens that
should stop; an unregistration reports what the worker still held to the
decider as lost, so it is dispatched again at once.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence

from orbit_model.broker_roles import Role, covers, may_serve
from orbit_model.errors import ErrorCode, OrbitError
from orbit_model.ir import HTTP_CONTRACT_VERSION, HTTP_TASK, WORKFLOW_TASK_PREFIX
from orbit_model.messages import (
    ContractAnnouncement,
    ControlError,
    ControlReply,
    ControlRequest,
    DeliveryLost,
    ErrorBody,
    Heartbeat,
    HeartbeatReply,
    InflightTask,
    RegisterWorker,
    Registration,
    Unregistered,
    UnregisterWorker,
)
from orbit_model.names import (
    BUILTIN_RUNTIME,
    CONTRACT_VERSION,
    RESERVED_TASK_PREFIX,
    TASK_NAME,
    TASK_NAME_RULE,
)
from orbit_model.state import ExecutionState, UnitStatus
from orbit_model.topology import task_key
from orbit_model.units import parse_unit
from orbit_services.runtime.broker import TaskQueues
from orbit_services.store import EventStore, StateCache

log = logging.getLogger("orbit.dispatcher")

HELD_STATES = 20_000
"""Executions whose state the dispatcher keeps between heartbeats, least recent dropped."""

UNREGISTERED = "worker unregistered"
"""The reason given to the decider for tasks an unregistering worker still held."""

BUILTIN_CONTRACTS = frozenset({(HTTP_TASK, HTTP_CONTRACT_VERSION)})
"""The built-in tasks a worker of :data:`BUILTIN_RUNTIME` may serve."""


# -- registration -------------------------------------------------------------


def check_registration(request: RegisterWorker, *, builtin_allowed: bool) -> None:
    """Refuse a registration Orbit cannot serve.

    Args:
        builtin_allowed: Whether the worker may serve :data:`BUILTIN_CONTRACTS`: it is
            the HTTP adapter's RabbitMQ user (with ``ORBIT_BROKER_AUTH=shared``,
            where users say nothing, it registered with runtime ``orbit``).

    Raises:
        OrbitError: ``INVALID_REQUEST`` without a worker id, contracts or with a
            malformed name or version; ``RESERVED_TASK`` for a child-workflow
            contract (``workflow:…``) or a built-in task (``orbit.…``), except
            :data:`BUILTIN_CONTRACTS` for a worker allowed them.
    """
    if not request.worker_id.strip():
        raise OrbitError(ErrorCode.INVALID_REQUEST, "worker_id is required")
    if not request.contracts:
        raise OrbitError(
            ErrorCode.INVALID_REQUEST, "a worker must announce at least one task contract"
        )
    for contract in request.contracts:
        name = contract.task
        if name.startswith(WORKFLOW_TASK_PREFIX):
            raise OrbitError(
                ErrorCode.RESERVED_TASK,
                f"'{name}' is how a workflow calls a child workflow; no worker can serve it",
            )
        builtin = (name, contract.version) in BUILTIN_CONTRACTS
        if name.startswith(RESERVED_TASK_PREFIX) and not (builtin and builtin_allowed):
            raise OrbitError(
                ErrorCode.RESERVED_TASK,
                f"'{name}' is reserved for Orbit's built-in tasks ({RESERVED_TASK_PREFIX}*)",
            )
        if not TASK_NAME.fullmatch(name):
            raise OrbitError(
                ErrorCode.INVALID_REQUEST, f"task name '{name}' is not valid: {TASK_NAME_RULE}"
            )
        if not CONTRACT_VERSION.fullmatch(contract.version):
            raise OrbitError(
                ErrorCode.INVALID_REQUEST,
                f"'{name}' has an invalid contract version '{contract.version}'",
            )


def check_permitted(request: RegisterWorker, user: str, patterns: Sequence[str] | None) -> None:
    """Refuse the contracts whose queues the worker's RabbitMQ ``user`` may not read, as
    its task ``patterns`` say (None: none are recorded, so nothing is checked); else
    RabbitMQ refuses the consume, which closes the worker's channel.

    Raises:
        OrbitError: ``TASK_NOT_PERMITTED``, naming the contracts and the patterns.
    """
    if patterns is None:
        return
    outside = [
        task_key(contract.task, contract.version)
        for contract in request.contracts
        if not covers(patterns, contract.task)
    ]
    if outside:
        raise OrbitError(
            ErrorCode.TASK_NOT_PERMITTED,
            f"RabbitMQ user {user!r} may read only the task queues of its --tasks patterns"
            f" ({', '.join(patterns)}), so it could not consume {', '.join(outside)}: serve"
            " them as a worker user whose patterns cover them (`orbit broker user add"
            " --role worker --tasks PATTERN NAME` sets a user's patterns)",
        )


def contract_warnings(
    contracts: Iterable[ContractAnnouncement], in_use: Mapping[str, set[str]]
) -> list[str]:
    """A warning for each contract that no registered workflow calls: its task at no
    version (a misspelt name, or workflows not registered yet: the warning says both),
    or at other versions only. Orbit's built-in tasks get none (they serve http steps)."""
    warnings = []
    for contract in contracts:
        if contract.task.startswith(RESERVED_TASK_PREFIX):
            continue
        versions = in_use.get(contract.task)
        if not versions:
            warnings.append(
                f"'{contract.task}' (version {contract.version}) is called by no registered"
                " workflow: check its name; its tasks reach this worker once a workflow that"
                " calls it is registered"
            )
        elif contract.version not in versions:
            warnings.append(
                f"'{contract.task}' is announced at version {contract.version}, but registered"
                f" workflows call it at {', '.join(sorted(versions))}; no task of theirs"
                " will reach this worker"
            )
    return warnings


# -- heartbeats and unregistration ----------------------------------------------


def token_is_live(state: ExecutionState, token: str) -> bool:
    """Whether the delivery ``token`` is still wanted: the attempt its unit waits for.

    It is not once its unit resolved, was dispatched again (a timeout or a lost
    delivery), or the execution stopped and the unit is not part of its
    compensation or cleanup.
    """
    key = state.unit_of_token(token)
    if key is None or state.terminal:
        return False
    unit = state.unit(key)
    if unit.status is not UnitStatus.DISPATCHED or unit.token != token:
        return False
    return state.abort is None or parse_unit(key).role in ("compensate", "finally")


def tokens_to_cancel(
    states: Mapping[str, ExecutionState], inflight: Iterable[InflightTask]
) -> tuple[str, ...]:
    """The tokens among ``inflight`` that should stop; an unknown execution's are all stopped."""
    cancel = []
    for task in inflight:
        state = states.get(task.execution_id)
        if state is None or not token_is_live(state, task.token):
            cancel.append(task.token)
    return tuple(cancel)


def lost_deliveries(
    inflight: Iterable[InflightTask], reason: str = UNREGISTERED
) -> list[DeliveryLost]:
    """The notices telling the decider that these tasks' worker is gone."""
    return [
        DeliveryLost(execution_id=task.execution_id, token=task.token, reason=reason)
        for task in inflight
    ]


def control_error(error: OrbitError) -> ControlError:
    return ControlError(error=ErrorBody(code=str(error.code), message=error.message))


# -- the handler --------------------------------------------------------------

PublishLost = Callable[[Sequence[DeliveryLost]], Awaitable[None]]


class ControlHandler:
    """Answers worker-control requests; never raises an :class:`OrbitError`, answers it.

    Args:
        store: The worker sessions, the contracts registered workflows use and
            the state of executions whose tasks workers hold.
        queues: Declares the queues of announced contracts.
        publish_lost: Sends :class:`DeliveryLost` notices to the decider, confirmed.
        heartbeat_interval_ms: Told to workers: how often to heartbeat.
        session_timeout_ms: Told to workers: silence after which a session is lost.
    """

    def __init__(
        self,
        store: EventStore,
        queues: TaskQueues,
        publish_lost: PublishLost,
        *,
        heartbeat_interval_ms: int,
        session_timeout_ms: int,
        users_checked: bool = False,
    ) -> None:
        self._users_checked = users_checked
        self._registry = store.sessions
        self._store = store
        self._queues = queues
        self._publish_lost = publish_lost
        self._heartbeat_interval_ms = heartbeat_interval_ms
        self._session_timeout_ms = session_timeout_ms
        self._states = StateCache(store, HELD_STATES)
        """The executions whose tasks workers hold, as of their last heartbeat: a
        heartbeat reads only the events appended since, not whole histories."""

    async def handle(
        self, request: ControlRequest, sender: Role | None = None, user: str | None = None
    ) -> ControlReply:
        """Answer ``request`` from the RabbitMQ ``user``, of role ``sender`` (None: unknown,
        or shared mode)."""
        try:
            if isinstance(request, RegisterWorker):
                return await self.register(request, sender, user)
            if isinstance(request, Heartbeat):
                return await self.heartbeat(request)
            return await self.unregister(request)
        except OrbitError as error:
            if error.code is ErrorCode.INTERNAL:
                log.error(
                    "a %s request failed: %s",
                    request.type,
                    error.message,
                    exc_info=error,
                    extra={"action": "control.failed"},
                )
            return control_error(error)

    async def register(
        self, request: RegisterWorker, sender: Role | None = None, user: str | None = None
    ) -> Registration:
        # Built-in tasks are the HTTP adapter's: known by its RabbitMQ user, which no
        # one else can log in as; only with one user for all, by what it says it is.
        builtin_allowed = (
            may_serve(sender, HTTP_TASK)
            if self._users_checked
            else request.runtime == BUILTIN_RUNTIME
        )
        check_registration(request, builtin_allowed=builtin_allowed)
        if self._users_checked and sender is Role.WORKER and user:
            check_permitted(request, user, await self._store.worker_users.tasks_of(user))
        warnings = contract_warnings(request.contracts, await self._store.task_versions_in_use())
        queues = {}
        for contract in request.contracts:
            name = await self._queues.ensure(contract.task, contract.version)
            queues[task_key(contract.task, contract.version)] = name
        session_id = await self._registry.open(request)
        log.info(
            "worker %s registered with %d contracts",
            request.worker_id,
            len(request.contracts),
            extra={"action": "worker.registered", "session_id": session_id},
        )
        for warning in warnings:
            log.warning(warning, extra={"action": "worker.contract_unused"})
        return Registration(
            session_id=session_id,
            heartbeat_interval_ms=self._heartbeat_interval_ms,
            session_timeout_ms=self._session_timeout_ms,
            task_queues=queues,
            warnings=tuple(warnings),
        )

    async def heartbeat(self, request: Heartbeat) -> HeartbeatReply:
        await self._registry.touch(request.session_id, request.inflight)
        if not request.inflight:
            return HeartbeatReply()
        return HeartbeatReply(cancel=tokens_to_cancel(await self._held(request), request.inflight))

    async def _held(self, request: Heartbeat) -> dict[str, ExecutionState]:
        """The current state of each execution a heartbeat names (those that exist)."""
        ids = sorted({task.execution_id for task in request.inflight})
        # One whose history no longer decodes is left out, so its tasks are cancelled:
        # it cannot go on (the decider fails it), and the worker's other tasks must
        # not lose their heartbeat over it.
        states, _unreadable = await self._states.current_or_unreadable(ids)
        return {eid: state for eid, state in states.items() if state.last_seq > 0}

    async def unregister(self, request: UnregisterWorker) -> Unregistered:
        # Report first, close after: if reporting fails the session still names
        # its tasks, and a repeated request reports them again.
        inflight = await self._registry.inflight(request.session_id)
        # A task another session holds now (the broker gave it there) is not lost.
        held = await self._registry.held_elsewhere(
            [task.token for task in inflight], request.session_id
        )
        lost = lost_deliveries(task for task in inflight if task.token not in held)
        if lost:
            await self._publish_lost(lost)
        await self._registry.close(request.session_id)
        log.info(
            "worker session %s unregistered, %d tasks reported lost",
            request.session_id,
            len(lost),
            extra={"action": "worker.unregistered", "session_id": request.session_id},
        )
        return Unregistered(lost=len(lost))
