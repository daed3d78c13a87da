"""The services' settings: the SDK's (broker, namespace, logs) and everything the server adds.

One class for every service, read from ``ORBIT_*`` environment variables
(SPEC §5), so that ``orbit dev`` and a deployment of separate processes read
the same names. A bad value stops the service at start with a message that
names the variable, never a traceback.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal, Self
from urllib.parse import urlsplit

from pydantic import Field, field_validator, model_validator
from pydantic_settings import NoDecode

from orbit_model.decider import Limits
from orbit_model.payloads import DEFAULT_MAX_DEPTH
from orbit_model.plan import Policy
from orbit_model.snapshots import DEFAULT_SNAPSHOT_EVERY
from orbit_model.topology import DEFAULT_REPLICAS, Topology
from orbit_sdk.settings import ClientSettings, GatewayAddress, SettingsError, load
from orbit_services.runtime.addresses import AllowList

__all__ = ["Settings", "SettingsError", "load_settings"]


class Settings(ClientSettings, GatewayAddress):
    """Settings of every Orbit service. ``http_host`` and ``http_port`` (where the
    gateway listens) are :class:`GatewayAddress`'s, which the ``orbit`` command
    line also reads for its default ``--url``."""

    database_url: str = "postgresql://postgres@127.0.0.1:5432/orbit"
    http_adapter_enabled: bool = False
    http_allow_hosts: Annotated[tuple[str, ...], NoDecode] = ()
    """Destinations the HTTP adapter may reach although they are not public: a
    comma-separated list of host names (``*.corp.example`` for subdomains),
    addresses and CIDR networks (``api.internal,10.1.0.0/16,127.0.0.1``).
    Empty: public addresses only (docs/http-steps.md)."""
    http_allowed_hosts: Annotated[tuple[str, ...], NoDecode] = ()
    """The ``Host`` values the gateway serves (against DNS rebinding): a comma-separated
    list of names, each with or without a port (``orbit.example.com,10.0.0.5:8080``);
    ``*``: any. Empty: ``localhost``, ``127.0.0.1``, ``[::1]`` and ``http_host``, on
    ``http_port``. Not to be confused with ``http_allow_hosts``, the HTTP adapter's."""
    http_cors_origins: Annotated[tuple[str, ...], NoDecode] = ()
    """Web origins (``https://console.example.com``) whose pages may call the API from a
    browser: a comma-separated list. Empty: no CORS headers at all."""
    http_max_header_bytes: int = Field(64 * 1024, ge=1024)
    """The largest request line and headers the gateway reads, counted as they arrive;
    past it the request is answered 431 (docs/operations.md, "HTTP connections")."""
    http_header_timeout_seconds: float = Field(10.0, gt=0, le=3600)
    """How long the gateway waits for a request's line and headers (from the
    connection's start or its last answer); past it: 408, and the connection closes."""
    http_body_timeout_seconds: float = Field(60.0, gt=0, le=3600)
    """How long the gateway waits for a request's whole body, from the end of its
    headers; past it: 408, and the connection closes."""
    postgres_request_timeout_seconds: float = Field(5.0, gt=0, le=3600)
    """How long a statement the gateway makes for a request, or its wait for a pooled
    connection, may take; past it Postgres is taken as unavailable: 503 ``UNAVAILABLE``
    with ``Retry-After``. A frozen or silently cut-off server answers nothing, and would
    otherwise hold every request for as long as it lasts."""
    broker_request_timeout_seconds: float = Field(2.0, gt=0, le=3600)
    """How long a request waits for RabbitMQ to confirm the messages it committed (a
    start's, a signal's); past it the request is answered all the same, and the outbox
    sweep publishes them once the broker takes them again. A blocked (memory or disk
    alarm) or frozen broker would otherwise hold every request for as long as it lasts."""
    http_max_connections: int = Field(4_096, ge=1)
    """Connections the gateway holds at once; one more closes the one waiting longest on
    its client, or is answered 503. Open files needed: this plus 2,560."""
    auth: Literal["tokens", "disabled"] = "tokens"
    """``tokens``: every API request needs a token (``orbit token create``); ``disabled``:
    anyone who reaches the gateway may do everything (a warning says so at start and on
    ``/readyz``)."""
    auth_jwks_url: str | None = None
    """Also accept JWTs signed by a key of this JWKS (an identity provider's); unset:
    only Orbit's API tokens. Needs ``auth_jwt_audience``."""
    auth_jwt_audience: str | None = None
    """The ``aud`` a JWT must carry."""
    auth_jwt_issuer: str | None = None
    """The ``iss`` a JWT must carry; unset: any."""
    auth_jwt_scopes_claim: str = "scope"
    """The claim holding a JWT's Orbit scopes (a space-separated string or a list)."""
    auth_jwt_workflows_claim: str | None = None
    """The claim holding the workflow patterns that narrow a JWT; unset: none do."""
    console_session_seconds: int = Field(8 * 3600, ge=60, le=30 * 86_400)
    """How long a sign-in to the console lasts at most; it ends sooner when its person
    signs out, when its API token is revoked or expires, or at its JWT's ``exp``."""
    broker_auth: Literal["roles", "shared"] = "roles"
    """``roles``: each service connects as its own RabbitMQ user (``NS.decider``, ...) and
    consumers take each message kind only from the roles allowed to send it
    (``orbit broker setup``); ``shared``: one user for everything, no sender checks
    (a warning says so at start). docs/security.md."""
    broker_admin_url: str | None = None
    """RabbitMQ's management API, for ``orbit broker`` and ``orbit dev``
    (``http://user:password@host:15672``); unset: port 15672 on ``ORBIT_AMQP_URL``'s
    host, with its user and password."""
    metrics_public: bool = False
    """Whether ``/metrics`` answers without a token (for a scraper inside the network)."""
    http_max_response_bytes: int = Field(1_048_576, ge=1)
    """Largest response body an http step reads (decoded); beyond it the step
    fails with ``HTTP_RESPONSE_TOO_LARGE``."""
    http_max_redirects: int = Field(10, ge=0, le=100)
    """Redirects an http step follows; one more fails it with
    ``HTTP_TOO_MANY_REDIRECTS``. 0: redirects are not followed."""
    http_default_timeout_ms: int = Field(30_000, ge=1)
    """The total time of a request whose http step sets no ``timeout``."""
    http_adapter_concurrency: int = Field(64, ge=1, le=10_000)
    """Requests one HTTP adapter makes at once."""
    max_active_executions: int | None = Field(None, ge=1)
    max_fan_out: int | None = Field(10_000, ge=1)
    max_history_events: int | None = Field(100_000, ge=10)
    snapshot_every: int = Field(DEFAULT_SNAPSHOT_EVERY, ge=0)
    """Events between two snapshots of an execution's state, written by the decider
    with its append; a load reads the last one and the events after it. 0: none
    (docs/architecture.md, "Snapshots")."""
    max_payload_bytes: int | None = Field(2 * 1024 * 1024, ge=1)
    """The largest input, signal payload, cancel reason or task output (compact JSON)."""
    max_payload_depth: int = Field(DEFAULT_MAX_DEPTH, ge=1, le=1000)
    """How deep those may nest: deeper values are refused before anything is stored."""
    max_wait_seconds: float = Field(60.0, gt=0, le=3600)
    """The longest a ``?wait=`` request is held; longer waits are answered after this
    with the execution as it is (keep it under the idle timeout of proxies before
    the gateway)."""
    max_definition_bytes: int = Field(1024 * 1024, ge=1)
    """The largest definition a gateway registers (its YAML or IR as sent)."""
    metrics_port: int | None = Field(None, ge=1, le=65535)
    """Where the services other than the gateway serve ``/metrics`` (on
    ``http_host``); unset: they serve none. The gateway always serves it on
    its own port."""
    gauge_interval_ms: int = Field(10_000, ge=100)
    """How often the timer service counts active executions, timers due and the outbox."""
    decider_batch_size: int = Field(256, ge=1, le=10_000)
    """Inputs one decider commits together at most."""
    decider_lease_ms: int = Field(10_000, ge=1_000, le=300_000)
    """How long a decider's lease on its partitions lasts unless renewed (it renews
    ten times per lease): a decider that dies is replaced within about this long
    (docs/scaling.md)."""
    decider_id: str | None = Field(None, pattern=r"^[A-Za-z0-9][A-Za-z0-9_.:@-]{0,127}$")
    """This decider's name among the installation's deciders; unset: host, pid and a
    random suffix. Two deciders must never share one."""
    queue_replicas: int = Field(DEFAULT_REPLICAS, ge=1, le=99)
    """Nodes of a RabbitMQ cluster each queue is made on (``x-quorum-initial-group-size``;
    a node holds one at most, so a single node holds one). A queue that exists keeps
    the replicas it was made with."""

    @field_validator("database_url")
    @classmethod
    def _postgres_url(cls, value: str) -> str:
        if not value.startswith(("postgresql://", "postgres://")):
            raise ValueError("must be a postgresql:// URL")
        return value

    @field_validator("http_allow_hosts", mode="before")
    @classmethod
    def _allow_hosts(cls, value: Any) -> Any:
        entries = _comma_list(value)
        if isinstance(entries, tuple):
            AllowList.parse(entries)  # a bad entry stops the service, named
        return entries

    @field_validator("http_allowed_hosts", mode="before")
    @classmethod
    def _allowed_hosts(cls, value: Any) -> Any:
        entries = _comma_list(value)
        return tuple(entry.lower() for entry in entries) if isinstance(entries, tuple) else entries

    @field_validator("http_cors_origins", mode="before")
    @classmethod
    def _cors_origins(cls, value: Any) -> Any:
        entries = _comma_list(value)
        if not isinstance(entries, tuple):
            return entries
        origins = tuple(origin.rstrip("/") for origin in entries)
        for origin in origins:
            if origin != "*" and not origin.startswith(("http://", "https://")):
                raise ValueError(f"{origin!r} is not an origin such as https://host:port")
        return origins

    @field_validator("auth_jwks_url")
    @classmethod
    def _jwks_url(cls, value: str | None) -> str | None:
        # Whoever can change the keys on their way can sign any token: https, unless
        # the provider is on this machine.
        if value is None or value.startswith("https://"):
            return value
        host = urlsplit(value).hostname if value.startswith("http://") else None
        if host not in ("127.0.0.1", "localhost", "::1"):
            raise ValueError("must be an https:// URL (http:// only on loopback)")
        return value

    @model_validator(mode="after")
    def _jwts_have_an_audience(self) -> Self:
        # Without it, a JWT the identity provider issued for any other service would do.
        if self.auth_jwks_url is not None and not self.auth_jwt_audience:
            raise ValueError("ORBIT_AUTH_JWKS_URL needs ORBIT_AUTH_JWT_AUDIENCE")
        return self

    @property
    def topology(self) -> Topology:
        """The names of every exchange and queue, and how many replicas each queue has."""
        return Topology(self.namespace, self.decider_partitions, self.queue_replicas)

    @property
    def http_allow_list(self) -> AllowList:
        return AllowList.parse(self.http_allow_hosts)

    @property
    def limits(self) -> Limits:
        return Limits(
            max_fan_out=self.max_fan_out,
            max_history_events=self.max_history_events,
        )

    @property
    def policy(self) -> Policy:
        """What a decider's turn may do: the limits, and whether http steps have an adapter."""
        return Policy(
            limits=self.limits,
            http_adapter_enabled=self.http_adapter_enabled,
            max_payload_bytes=self.max_payload_bytes,
            max_payload_depth=self.max_payload_depth,
        )


def _comma_list(value: Any) -> Any:
    """A comma-separated setting (or a list) as a tuple of its non-empty entries, stripped;
    anything else as it is, for pydantic to refuse."""
    entries = value.split(",") if isinstance(value, str) else value
    if isinstance(entries, list | tuple):
        return tuple(str(entry).strip() for entry in entries if str(entry).strip())
    return entries


def load_settings(**overrides: object) -> Settings:
    """The settings from the environment (and ``overrides``), or a readable error.

    Raises:
        SettingsError: Naming each bad variable and what is wrong with it.
    """
    return load(Settings, **overrides)
