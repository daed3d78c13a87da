"""Who sent a message, and whether its consumer takes that kind from them.

With ``ORBIT_BROKER_AUTH=roles`` (the default) every service connects as its
role's RabbitMQ user, and every consumer asks :class:`Senders` before it acts
on a message: the sender is the message's AMQP ``user_id``, which RabbitMQ
has checked against the connection's user. A refused message is dropped and
counted (``orbit_messages_refused_total``), with one log line per reason per
ten seconds. With ``shared`` there is one user for all, and nothing to check.
The decider also takes a result only from a user that may answer its task
(:class:`SenderBook` says who sent it).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable, Sequence

from aio_pika.abc import AbstractIncomingMessage

from orbit_model.broker_roles import Role, Sender, role_of, sender_refusal, user_name
from orbit_model.errors import ErrorCode, OrbitError
from orbit_model.messages import PROTOCOL_VERSION, DeciderInput
from orbit_model.parked import speaker
from orbit_sdk.amqp_nodes import login_of
from orbit_sdk.cli.hints import orbit_command
from orbit_sdk.logs import LogThrottle
from orbit_services.runtime import metrics
from orbit_services.runtime.settings import Settings

log = logging.getLogger("orbit.senders")

SHARED_WARNING = (
    "ORBIT_BROKER_AUTH=shared: every process uses one RabbitMQ user, and any process"
    " holding it can forge results, timers and lost-task notices. Use it for tests and"
    " quick local runs only; `orbit broker setup` creates a user per role."
)


def amqp_login(amqp_url: str) -> str:
    """The user an AMQP URL logs in as (``guest`` when it names none, as RabbitMQ does);
    every node of a list logs in as the same."""
    return login_of(amqp_url)


def check_identity(settings: Settings, role: Role) -> None:
    """Refuse to start a service that would connect as another user than its role's.

    With ``shared`` it warns instead, loudly, once per service.

    Raises:
        OrbitError: ``INVALID_SETTINGS``, naming the user it must connect as.
    """
    if settings.broker_auth == "shared":
        log.warning(SHARED_WARNING, extra={"action": "broker.shared_user"})
        return
    expected = user_name(settings.namespace, role)
    login = amqp_login(settings.amqp_url)
    if login != expected:
        raise OrbitError(
            ErrorCode.INVALID_SETTINGS,
            f"ORBIT_BROKER_AUTH=roles: the {role} connects to RabbitMQ as {expected!r},"
            f" but ORBIT_AMQP_URL logs in as {login!r} and no login is saved for it."
            f" Create the users with `{orbit_command()} broker setup --save` (it saves"
            " their logins where `orbit service` finds them), or give this service its own"
            " URL, or set ORBIT_BROKER_AUTH=shared for a quick local run.",
        )


class Senders:
    """The sender checks of one consumer (``decider``, ``gateway``, ``dispatcher``)."""

    def __init__(self, settings: Settings, consumer: str) -> None:
        self.checked = settings.broker_auth == "roles"
        self._namespace = settings.namespace
        self._consumer = consumer
        self._throttle = LogThrottle(log)

    def role(self, message: AbstractIncomingMessage) -> Role | None:
        """The role of the message's sender; None for no Orbit user (or shared mode)."""
        return role_of(self._namespace, message.user_id) if self.checked else None

    def refused(self, message: AbstractIncomingMessage, kind: str) -> bool:
        """Whether to drop ``message`` (of type ``kind``) for its sender; counted if so."""
        if not self.checked:
            return False
        reason = sender_refusal(self._consumer, kind, self.role(message))
        if reason is None:
            return False
        self.count(message, kind, reason)
        return True

    def count(self, message: AbstractIncomingMessage, kind: str, reason: str) -> None:
        """Count (and log, throttled) a message refused for ``reason``."""
        metrics.MESSAGES_REFUSED.labels(self._consumer, kind, reason).inc()
        self._throttle.log(
            logging.WARNING,
            f"{kind}:{reason}",
            "the %s refused a %s from %s (%s)",
            self._consumer,
            kind,
            sender_of(message.user_id),
            reason,
            extra={"action": "message.refused", "message_type": kind, "reason": reason},
        )

    def refusal(
        self,
        message: AbstractIncomingMessage,
        kind: str,
        senders: str,
        version: int = PROTOCOL_VERSION,
    ) -> str:
        """What to tell the sender of a refused ``kind`` message of protocol ``version``;
        ``senders`` says who may send it and how such a user is made."""
        if not message.user_id:
            told = (
                f"a message with no user_id may not send {kind}: set user_id to the RabbitMQ"
                f" user you log in as on every message ({senders})"
            )
            if version < PROTOCOL_VERSION:
                told += (
                    f". This is a version {version} message: since version"
                    f" {PROTOCOL_VERSION} every message carries user_id (docs/protocol.md,"
                    ' "Versions")'
                )
            return told
        role = self.role(message)
        if role is None:
            return (
                f"RabbitMQ user {message.user_id!r} is no Orbit user of namespace"
                f" {self._namespace!r} and may not send {kind} ({senders})"
            )
        return f"RabbitMQ user {message.user_id!r}, a {role}, may not send {kind} ({senders})"


PATTERNS_SECONDS = 10.0
"""How long the decider keeps a worker user's recorded task patterns before reading
them again: a change made with ``orbit broker user add`` applies within this."""
_PATTERNS_KEPT = 1_000
"""Worker users whose patterns are kept at once (there are seldom more than a few)."""

LoadPatterns = Callable[[str], Awaitable[tuple[str, ...] | None]]


class SenderBook:
    """Who sent each result, as the decider checks it (:class:`Sender`): the role its
    RabbitMQ user's name says, and a worker user's task patterns as ``orbit broker user
    add`` recorded them in Postgres (``load``), read again every :data:`PATTERNS_SECONDS`.
    """

    def __init__(
        self, namespace: str, load: LoadPatterns, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self._namespace = namespace
        self._load = load
        self._clock = clock
        self._patterns: dict[str, tuple[float, tuple[str, ...] | None]] = {}

    async def sender(self, user: str | None) -> Sender | None:
        """The sender ``user`` is; None for a message that names none.

        Raises:
            OrbitError: ``UNAVAILABLE`` while Postgres is away (a worker's patterns).
        """
        if user is None:
            return None
        role = role_of(self._namespace, user)
        if role is not Role.WORKER:
            return Sender(user, role)
        now = self._clock()
        kept = self._patterns.get(user)
        if kept is None or now - kept[0] > PATTERNS_SECONDS:
            if len(self._patterns) >= _PATTERNS_KEPT:
                self._patterns.clear()
            kept = (now, await self._load(user))
            self._patterns[user] = kept
        return Sender(user, role, kept[1])

    async def speakers(
        self, inputs: Sequence[DeciderInput], users: Sequence[str | None]
    ) -> list[Sender | None]:
        """Who speaks in each of the decider's ``inputs``, sent by ``users``
        (:attr:`orbit_model.plan.Facts.senders`); all None without ``users`` (one
        RabbitMQ user for all: nothing is checked)."""
        if not users:
            return [None] * len(inputs)
        return [
            await self.sender(speaker(item, user)) for item, user in zip(inputs, users, strict=True)
        ]


def sender_of(user_id: str | None) -> str:
    """A message's sender, for a log line or an answer: its user, or that it names none."""
    return f"RabbitMQ user {user_id!r}" if user_id else "a message with no user_id"
