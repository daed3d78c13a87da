"""Who is who on the broker: a RabbitMQ user per role, its permissions, and who may send what.

Pure naming and rules, shared by ``orbit broker setup`` (which creates the
users and sets their permissions) and by every consumer (which accepts a
message kind only from the roles allowed to send it).

A message's sender is its AMQP ``user_id``: every Orbit process sets it to
its connection's user, and RabbitMQ refuses a publish whose ``user_id`` is
not the connection's user, so it can't be forged. The role is read from the
user's name, which only the broker's administrator can choose:

- a service connects as ``NS.ROLE`` (``orbit.decider``);
- a worker as ``NS.worker.NAME``, a client as ``NS.client.NAME``.

The permissions are RabbitMQ's three regular expressions over the names of
exchanges and queues (``configure``, ``write``, ``read``; docs/security.md
explains each). The services may declare and bind the fixed topology, so any
of them can start first; workers and clients may touch nothing but their own
queues and the exchanges they publish to.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from orbit_model.names import RESERVED_TASK_PREFIX
from orbit_model.topology import DELIVERY_LIMIT, Topology


class Role(StrEnum):
    GATEWAY = "gateway"
    DECIDER = "decider"
    DISPATCHER = "dispatcher"
    TIMER = "timer"
    HTTP_ADAPTER = "http-adapter"
    WORKER = "worker"
    CLIENT = "client"


SERVICE_ROLES: tuple[Role, ...] = (
    Role.GATEWAY,
    Role.DECIDER,
    Role.DISPATCHER,
    Role.TIMER,
    Role.HTTP_ADAPTER,
)
"""One user each, ``NS.ROLE``, shared by every replica of the service."""
NAMED_ROLES: tuple[Role, ...] = (Role.WORKER, Role.CLIENT)
"""Any number of users each, ``NS.ROLE.NAME``, added one by one."""

USER_LABEL = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]{0,63}")
USER_LABEL_RULE = "1 to 64 letters, digits, - and _, starting with a letter or digit"
TASK_PATTERN = re.compile(r"[A-Za-z0-9_.*-]{1,100}")
TASK_PATTERN_RULE = "a task name in which * stands for any run of letters, digits, - _ ."

_TASK_CHARS = "[A-Za-z0-9_.-]"
_VERSION_CHARS = "[A-Za-z0-9_.+-]"
_NOTHING = "^$"


def user_name(namespace: str, role: Role, label: str | None = None) -> str:
    """The RabbitMQ user of ``role``: ``NS.ROLE`` for a service, ``NS.ROLE.LABEL`` otherwise.

    Raises:
        ValueError: A label for a service role, none for a worker or client, or a
            label that breaks :data:`USER_LABEL_RULE`.
    """
    if role in SERVICE_ROLES:
        if label is not None:
            raise ValueError(f"the {role} role has one user: it takes no name")
        return f"{namespace}.{role}"
    if label is None or not USER_LABEL.fullmatch(label):
        raise ValueError(f"a {role} user's name is {USER_LABEL_RULE}: {label!r}")
    return f"{namespace}.{role}.{label}"


def role_of(namespace: str, user: str | None) -> Role | None:
    """The role of the RabbitMQ user ``user`` in ``namespace``; None for anyone else."""
    if not user or not user.startswith(f"{namespace}."):
        return None
    role_text, dot, label = user[len(namespace) + 1 :].partition(".")
    try:
        role = Role(role_text)
    except ValueError:
        return None
    if role in SERVICE_ROLES:
        return role if not dot else None
    return role if USER_LABEL.fullmatch(label) else None


def task_pattern_regex(pattern: str) -> str:
    """The regular expression (unanchored) of the task names a glob such as ``payments.*``
    matches: ``*`` stands for any run of task-name characters, dots included.

    Raises:
        ValueError: A pattern that breaks :data:`TASK_PATTERN_RULE`.
    """
    if not TASK_PATTERN.fullmatch(pattern):
        raise ValueError(f"a task pattern is {TASK_PATTERN_RULE}: {pattern!r}")
    return f"{_TASK_CHARS}*".join(re.escape(part) for part in pattern.split("*"))


@dataclass(frozen=True)
class Permissions:
    """RabbitMQ's permissions of one user in the installation's vhost."""

    configure: str
    """Declare and delete: the queues and exchanges a user may create."""
    write: str
    """Publish to these exchanges; bind these queues."""
    read: str
    """Consume and get from these queues; bind from these exchanges."""


def _any_of(*alternatives: str) -> str:
    return "^(" + "|".join(alternatives) + ")$"


def permissions(topology: Topology, role: Role, tasks: Sequence[str] = ()) -> Permissions:
    """The least a user of ``role`` needs; ``tasks``: a worker's task patterns.

    Raises:
        ValueError: A worker without task patterns, or a bad pattern.
    """
    ns = re.escape(topology.namespace)
    # Declaring the fixed topology takes configure on every name, write on each
    # queue and read on each exchange (to bind): every service may, so none has to
    # start first. The names of the fixed queues and exchanges overlap, so they are
    # one expression.
    fixed = (
        rf"{ns}\.(commands|control|decider|decider\.[0-9]+|tasks|results"
        r"|dead-letter|dead-letter\.reports)"
    )
    task_queues = rf"{ns}\.task\..+"
    replies = r"amq\.default"  # answers go to the reply-to pseudo-queue through it
    if role is Role.GATEWAY:
        return Permissions(_any_of(fixed), _any_of(fixed, replies), _any_of(fixed))
    # The decider and the dispatcher declare a task's queue before the first assignment
    # goes there or a worker asks for it. Declaring a queue with a dead-letter exchange
    # takes read on the queue too (RabbitMQ checks that the declarer could read what it
    # would have dead-lettered).
    if role is Role.DECIDER:
        tasks_too = _any_of(fixed, task_queues)
        return Permissions(tasks_too, tasks_too, tasks_too)
    if role is Role.DISPATCHER:
        tasks_too = _any_of(fixed, task_queues)
        return Permissions(tasks_too, _any_of(fixed, task_queues, replies), tasks_too)
    if role is Role.TIMER:
        return Permissions(_any_of(fixed), _any_of(fixed), _any_of(fixed))
    submit = _any_of(rf"{ns}\.results", rf"{ns}\.control")
    if role is Role.HTTP_ADAPTER:
        builtin = re.escape(RESERVED_TASK_PREFIX)
        return Permissions(_NOTHING, submit, _any_of(rf"{ns}\.task\.{builtin}.+"))
    if role is Role.WORKER:
        if not tasks:
            raise ValueError("a worker user serves at least one task pattern")
        served = "|".join(task_pattern_regex(pattern) for pattern in tasks)
        # Never the built-in tasks, whatever the pattern: they are the HTTP adapter's.
        reserved = re.escape(RESERVED_TASK_PREFIX)
        own = rf"{ns}\.task\.(?!{reserved})({served})@{_VERSION_CHARS}+"
        return Permissions(_NOTHING, submit, _any_of(own))
    return Permissions(_NOTHING, _any_of(rf"{ns}\.commands"), _NOTHING)


def queue_policy(topology: Topology) -> dict[str, Any]:
    """The policy that gives every queue of Orbit its delivery limit and dead-letter exchange.

    Queue arguments are fixed once a queue exists; a policy is not. Queues
    declared before Orbit set ``x-delivery-limit`` get the limit this way
    (for quorum queues RabbitMQ applies the lower of argument and policy).
    """
    ns = re.escape(topology.namespace)
    return {
        "pattern": rf"^{ns}\.(commands|control|decider\.[0-9]+|task\..+)$",
        "apply-to": "queues",
        "priority": 0,
        "definition": {
            "delivery-limit": DELIVERY_LIMIT,
            "dead-letter-exchange": topology.dead_letter,
        },
    }


def policy_name(topology: Topology) -> str:
    return f"{topology.namespace}.queues"


# -- who may send what ---------------------------------------------------------

_RELAYS = frozenset({Role.GATEWAY, Role.DECIDER})
"""The services whose outbox relays publish the messages the decider and the gateway
commit (each relay also sweeps rows the other left behind)."""
_SERVICES = frozenset(SERVICE_ROLES)
_TASK_RUNNERS = frozenset({Role.WORKER, Role.HTTP_ADAPTER})

SENDERS: Mapping[str, Mapping[str, frozenset[Role]]] = {
    "decider": {
        # A worker's result, or a child's result to its parent (from an outbox).
        "TaskResult": _TASK_RUNNERS | _RELAYS,
        "TimerDue": frozenset({Role.TIMER}),
        "DeliveryLost": frozenset({Role.TIMER, Role.DISPATCHER}),
        "Wake": _RELAYS,
        "StartChild": _RELAYS,
        "CancelChild": _RELAYS,
        "MessageParked": frozenset({Role.DISPATCHER}),
    },
    "gateway": {
        kind: frozenset({Role.CLIENT}) | _SERVICES
        for kind in ("StartExecution", "SignalExecution", "CancelExecution")
    },
    "dispatcher": dict.fromkeys(("RegisterWorker", "Heartbeat", "UnregisterWorker"), _TASK_RUNNERS),
}
"""For each consumer, the roles each message kind is taken from (docs/protocol.md)."""


def sender_refusal(consumer: str, kind: str, role: Role | None) -> str | None:
    """Why ``consumer`` refuses a ``kind`` message from a user of ``role``; None: it doesn't.

    The reason is a metric label: ``unknown_sender`` (no Orbit user of this
    namespace) or ``wrong_role``.
    """
    if role is None:
        return "unknown_sender"
    allowed = SENDERS.get(consumer, {}).get(kind)
    if allowed is None or role not in allowed:
        return "wrong_role"
    return None


def covers(patterns: Sequence[str], task: str) -> bool:
    """Whether a worker user of task ``patterns`` may read the queues of ``task``, as its
    RabbitMQ permissions say (:func:`permissions`): never a built-in task's."""
    if task.startswith(RESERVED_TASK_PREFIX):
        return False
    return any(re.fullmatch(task_pattern_regex(pattern), task) for pattern in patterns)


@dataclass(frozen=True)
class Sender:
    """Who sent a result, as the decider checks it against the task it answers
    (:func:`orbit_model.inputs.answer_refusal`)."""

    user: str
    """The RabbitMQ user: the message's AMQP ``user_id``."""
    role: Role | None
    """Its role in the installation's namespace (:func:`role_of`); None: no Orbit user."""
    tasks: tuple[str, ...] | None = None
    """A worker user's task patterns as ``orbit broker user add`` recorded them; None when
    none were recorded (a user made otherwise, such as ``orbit dev``'s)."""


def may_serve(role: Role | None, task: str) -> bool:
    """Whether a worker registering as a user of ``role`` may serve ``task``: the built-in
    ``orbit.*`` tasks only the HTTP adapter's user."""
    return not task.startswith(RESERVED_TASK_PREFIX) or role is Role.HTTP_ADAPTER
