"""The settings a worker or client reads: ``ORBIT_*`` environment variables.

Every Orbit process reads the same names (SPEC §5); the server's settings
(``orbit_services.runtime.settings``) add their own to these. A bad value
stops the process at start with a message that names the variable, never a
traceback.
"""

from __future__ import annotations

import ipaddress
import os
from typing import Self, TypeVar

from pydantic import Field, ValidationError, field_validator, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from orbit_model.errors import ErrorCode, OrbitError
from orbit_sdk.amqp_nodes import split_nodes
from orbit_sdk.credentials import saved_broker_url

S = TypeVar("S", bound=BaseSettings)


class SettingsError(OrbitError):
    """The environment holds a setting Orbit cannot use (``INVALID_SETTINGS``)."""

    def __init__(self, message: str) -> None:
        super().__init__(ErrorCode.INVALID_SETTINGS, message)


class ClientSettings(BaseSettings):
    """What workers and clients need: where the broker is, and the installation's names."""

    model_config = SettingsConfigDict(env_prefix="ORBIT_", extra="ignore", frozen=True)

    amqp_url: str = "amqp://guest:guest@127.0.0.1:5672/"
    """RabbitMQ: one node's URL, or a cluster's nodes, comma-separated
    (:mod:`orbit_sdk.amqp_nodes`); a process connects to one and moves on to
    another when it goes away."""
    namespace: str = Field("orbit", pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")
    """Prefix of every exchange and queue, so installations can share a broker."""
    decider_partitions: int = Field(32, ge=1, le=1024)
    """Partition queues of the decider: at most this many deciders share the work.
    Fixed for the life of an installation (docs/scaling.md says how to choose it)."""
    session_timeout_ms: int = Field(30_000, ge=100)
    heartbeat_interval_ms: int = Field(5_000, ge=10)
    otlp_endpoint: str | None = None
    log_level: str = Field("INFO", pattern=r"^(?i:debug|info|warning|error|critical)$")
    log_format: str = Field("text", pattern=r"^(text|json)$")

    @field_validator("amqp_url")
    @classmethod
    def _amqp_url(cls, value: str) -> str:
        if "," not in value and not value.startswith(("amqp://", "amqps://")):
            raise ValueError("must be an amqp:// or amqps:// URL")
        split_nodes(value)  # a bad list says which entry, and why
        return value

    @model_validator(mode="after")
    def _heartbeats_fit_in_a_session(self) -> Self:
        # A session silent for its timeout is lost: with heartbeats not at least twice
        # as frequent, one late heartbeat expires a healthy worker, again and again.
        if self.session_timeout_ms < 2 * self.heartbeat_interval_ms:
            raise ValueError(
                f"ORBIT_SESSION_TIMEOUT_MS ({self.session_timeout_ms}) must be at least twice"
                f" ORBIT_HEARTBEAT_INTERVAL_MS ({self.heartbeat_interval_ms})"
            )
        return self


class GatewayAddress(BaseSettings):
    """Where the gateway listens: ``ORBIT_HTTP_HOST`` and ``ORBIT_HTTP_PORT``.

    The services' settings include these (the gateway serves on them), and the
    ``orbit`` command line reaches the gateway at :attr:`gateway_url` when it is given
    no ``--url`` (nor ``ORBIT_URL``), so a client started with the same
    environment as its gateway finds it.
    """

    model_config = SettingsConfigDict(env_prefix="ORBIT_", extra="ignore", frozen=True)

    http_host: str = "127.0.0.1"
    http_port: int = Field(8080, ge=1, le=65535)

    @property
    def gateway_url(self) -> str:
        """``http://HOST:PORT`` of the gateway on this machine: a wildcard host
        (``0.0.0.0``, ``::``, empty) is reached on the loopback address of its family."""
        host = self.http_host or "0.0.0.0"  # an empty host binds every interface too
        try:
            address = ipaddress.ip_address(host)
        except ValueError:
            return f"http://{host}:{self.http_port}"
        if address.is_unspecified:
            address = ipaddress.ip_address("::1" if address.version == 6 else "127.0.0.1")
        host = f"[{address}]" if address.version == 6 else str(address)
        return f"http://{host}:{self.http_port}"


def load(cls: type[S], **overrides: object) -> S:
    """Settings of class ``cls`` from the environment (and ``overrides``), or a readable error.

    Raises:
        SettingsError: Naming each bad variable and what is wrong with it.
    """
    try:
        return cls(**overrides)  # type: ignore[arg-type]
    except ValidationError as error:
        lines = []
        for item in error.errors():
            message = str(item["msg"]).removeprefix("Value error, ")
            if item["loc"]:
                name = "ORBIT_" + "_".join(str(part) for part in item["loc"]).upper()
                message = f"{name}: {message}"
            lines.append(message)  # a check of several settings names them itself
        raise SettingsError("invalid settings:\n  " + "\n  ".join(lines)) from None


def load_client_settings(role: str | None = None, **overrides: object) -> ClientSettings:
    """The worker's and client's settings from the environment (and ``overrides``).

    Args:
        role: ``worker`` or ``client``: without ``ORBIT_AMQP_URL``, the process logs in
            with the RabbitMQ user ``orbit dev`` saved for its role and namespace, if any
            (:mod:`orbit_sdk.credentials`).

    Raises:
        SettingsError: Naming each bad variable and what is wrong with it.
    """
    settings = load(ClientSettings, **overrides)
    if role is None or "amqp_url" in overrides or "ORBIT_AMQP_URL" in os.environ:
        return settings
    saved = saved_broker_url(settings.namespace, role)
    return settings if saved is None else load(ClientSettings, **overrides, amqp_url=saved)


def load_gateway_address(**overrides: object) -> GatewayAddress:
    """Where the gateway listens, from the environment (and ``overrides``).

    Raises:
        SettingsError: Naming each bad variable and what is wrong with it.
    """
    return load(GatewayAddress, **overrides)
