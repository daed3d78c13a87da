"""Who sent a message, and whether its consumer takes that kind from them.

With ``ORBIT_BROKER_AUTH=roles`` (the default) every service connects as its
role's RabbitMQ user, and every consumer asks :class:`Senders` before it acts
on a message: the sender is the message's AMQP ``user_id``, which RabbitMQ
has checked against the connection's user. A refused message is dropped and
counted (``orbit_messages_refused_total``), with one log line per reason per
ten seconds. With ``shared`` there is one user for all, and nothing to check.
"""

from __future__ import annotations

import logging

from aio_pika.abc import AbstractIncomingMessage

from orbit_model.broker_roles import Role, role_of, sender_refusal, user_name
from orbit_model.errors import ErrorCode, OrbitError
from orbit_sdk.amqp_nodes import login_of
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
            f" but ORBIT_AMQP_URL logs in as {login!r}. Create the users with"
            " `orbit broker setup` and give this service its own URL, or set"
            " ORBIT_BROKER_AUTH=shared for a quick local run.",
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
            "the %s refused a %s from RabbitMQ user %r (%s)",
            self._consumer,
            kind,
            message.user_id,
            reason,
            extra={"action": "message.refused", "message_type": kind, "reason": reason},
        )
