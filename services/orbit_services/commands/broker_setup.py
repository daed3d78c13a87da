"""RabbitMQ users per role: made through the management API, or printed as ``rabbitmqctl``.

``orbit broker setup`` makes one user per service role (``NS.gateway``,
``NS.decider``, ...) with the permissions of
:func:`~orbit_model.broker_roles.permissions`, and the policy that gives
every queue its delivery limit (also to queues declared before Orbit set it
as an argument). It is idempotent: a user that exists keeps its password
unless one is given or it is rotated; permissions and the policy are set
again every time, so an upgrade's changes reach old installations.
``orbit broker user add`` makes one worker or client user. ``orbit dev`` and
the tests use :func:`provision_local_roles` to do all of it on a local broker,
keeping the logins in the credentials file (:mod:`orbit_sdk.credentials`):
each user keeps the password saved for it there, so that starting ``orbit dev``
again never locks out the processes that still log in with it.
"""

from __future__ import annotations

import json
import secrets
import shlex
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote, unquote, urlsplit, urlunsplit

import httpx

from orbit_model.broker_roles import (
    SERVICE_ROLES,
    Permissions,
    Role,
    permissions,
    policy_name,
    queue_policy,
    role_of,
    user_name,
)
from orbit_model.errors import ErrorCode, OrbitError
from orbit_model.topology import Topology
from orbit_sdk.amqp_nodes import first_node, host_of, login_of, vhost_of, with_login
from orbit_sdk.cli.hints import orbit_command
from orbit_sdk.credentials import save_broker_url, saved_broker_url
from orbit_services.runtime.settings import Settings

_TIMEOUT_SECONDS = 10.0


def new_password() -> str:
    """A random password that may stand in a URL as it is."""
    return secrets.token_urlsafe(24)


def management_url(settings: Settings) -> str:
    """Where the management API is: ``ORBIT_BROKER_ADMIN_URL``, else port 15672 (15671
    for amqps) on the broker's host (the first node of a list: each node of a cluster
    serves the API of all), logging in as ``ORBIT_AMQP_URL``'s user."""
    if settings.broker_admin_url:
        return settings.broker_admin_url
    node = first_node(settings.amqp_url)
    parts = urlsplit(node)
    scheme, port = ("https", 15671) if parts.scheme == "amqps" else ("http", 15672)
    host = host_of(node)
    login = f"{parts.username or 'guest'}:{parts.password or 'guest'}"
    return f"{scheme}://{login}@{host}:{port}"


class BrokerAdmin:
    """RabbitMQ's management HTTP API, as an administrator, for one virtual host.

    Every failure is an :class:`~orbit_model.errors.OrbitError`: ``UNAVAILABLE`` when
    the API does not answer (the plugin is off), ``PERMISSION_DENIED`` when it refuses
    the login, ``INTERNAL`` for anything else it refuses, with its reason.
    """

    def __init__(self, url: str, vhost: str) -> None:
        parts = urlsplit(url)
        self.base = urlunsplit(
            parts._replace(netloc=parts.netloc.rpartition("@")[2], path="/api")
        ).rstrip("/")
        self.vhost = vhost
        self._http = httpx.AsyncClient(
            auth=(unquote(parts.username or "guest"), unquote(parts.password or "guest")),
            timeout=_TIMEOUT_SECONDS,
        )

    @classmethod
    def from_settings(cls, settings: Settings) -> BrokerAdmin:
        return cls(management_url(settings), vhost_of(settings.amqp_url))

    async def close(self) -> None:
        await self._http.aclose()

    async def __aenter__(self) -> BrokerAdmin:
        return self

    async def __aexit__(self, *_exc: object) -> None:
        await self.close()

    async def _call(self, method: str, path: str, body: Any = None, missing: Any = None) -> Any:
        """The API's answer; ``missing`` for a GET or DELETE of something that is not there."""
        url = f"{self.base}/{path}"
        try:
            response = await self._http.request(method, url, json=body)
        except httpx.HTTPError as error:
            raise OrbitError(
                ErrorCode.UNAVAILABLE,
                f"RabbitMQ's management API at {self.base} did not answer ({error!r});"
                " enable it with `rabbitmq-plugins enable rabbitmq_management`, or use"
                f" `{orbit_command()} broker setup --print` and run the commands it prints",
            ) from error
        if response.status_code == 404 and method in ("GET", "DELETE"):
            return missing
        if response.status_code in (401, 403):
            raise OrbitError(
                ErrorCode.PERMISSION_DENIED,
                f"RabbitMQ's management API refused {method} {path}: the login of"
                " ORBIT_BROKER_ADMIN_URL (else ORBIT_AMQP_URL) must be an administrator",
            )
        if response.status_code >= 400:
            raise OrbitError(
                ErrorCode.INTERNAL,
                f"RabbitMQ's management API refused {method} {path}:"
                f" {response.status_code} {response.text[:300]}",
            )
        return response.json() if response.content else None

    def _in_vhost(self, kind: str, name: str) -> str:
        return f"{kind}/{quote(self.vhost, safe='')}/{quote(name, safe='')}"

    async def users(self) -> list[str]:
        found = await self._call("GET", "users") or []
        return [str(user["name"]) for user in found]

    async def put_user(self, name: str, password: str) -> None:
        await self._call("PUT", f"users/{quote(name, safe='')}", {"password": password, "tags": ""})

    async def delete_user(self, name: str) -> bool:
        """Delete the user ``name``; whether it existed."""
        return (
            await self._call("DELETE", f"users/{quote(name, safe='')}", missing=False) is not False
        )

    async def set_permissions(self, name: str, allowed: Permissions) -> None:
        body = {"configure": allowed.configure, "write": allowed.write, "read": allowed.read}
        await self._call("PUT", self._in_vhost("permissions", name), body)

    async def put_policy(self, name: str, policy: Mapping[str, Any]) -> None:
        await self._call("PUT", self._in_vhost("policies", name), dict(policy))

    async def delete_policy(self, name: str) -> None:
        await self._call("DELETE", self._in_vhost("policies", name))


@dataclass
class SetupResult:
    """What :func:`setup` did."""

    passwords: dict[str, str] = field(default_factory=dict)
    """The users whose password was set now (created or rotated), with it."""
    kept: list[str] = field(default_factory=list)
    """Users that existed and kept their password."""


async def setup(
    admin: BrokerAdmin,
    topology: Topology,
    passwords: Mapping[Role, str] | None = None,
    rotate: Iterable[Role] = (),
) -> SetupResult:
    """Make (or update) the service users, their permissions and the queue policy.

    Args:
        passwords: The password of a service user, to set whether or not it exists.
        rotate: Roles whose existing user gets a new random password.
    """
    given = dict(passwords or {})
    rotating = set(rotate)
    existing = set(await admin.users())
    result = SetupResult()
    for role in SERVICE_ROLES:
        name = user_name(topology.namespace, role)
        password = given.get(role)
        if password is None and (name not in existing or role in rotating):
            password = new_password()
        if password is None:
            result.kept.append(name)
        else:
            await admin.put_user(name, password)
            result.passwords[name] = password
        await admin.set_permissions(name, permissions(topology, role))
    await admin.put_policy(policy_name(topology), queue_policy(topology))
    return result


async def add_user(
    admin: BrokerAdmin,
    topology: Topology,
    role: Role,
    label: str,
    *,
    tasks: Sequence[str] = (),
    password: str | None = None,
) -> tuple[str, str]:
    """Make (or update) one worker or client user; its name and its new password.

    Raises:
        ValueError: A service role, a bad label, or a worker without tasks.
    """
    if role in SERVICE_ROLES:
        raise ValueError(f"{role} is a service role: `orbit broker setup` makes its user")
    name = user_name(topology.namespace, role, label)
    allowed = permissions(topology, role, tasks)  # checks the patterns before anything
    password = password or new_password()
    await admin.put_user(name, password)
    await admin.set_permissions(name, allowed)
    return name, password


async def remove_namespace(admin: BrokerAdmin, topology: Topology) -> list[str]:
    """Delete every Orbit user of the namespace, and its queue policy; the users' names."""
    doomed = [name for name in await admin.users() if role_of(topology.namespace, name) is not None]
    for name in doomed:
        await admin.delete_user(name)
    await admin.delete_policy(policy_name(topology))
    return doomed


def rabbitmqctl_commands(topology: Topology, vhost: str, passwords: Mapping[str, str]) -> list[str]:
    """What :func:`setup` does, as ``rabbitmqctl`` commands (for ``--print``).

    ``passwords`` names the users to create with their password: ``add_user``
    fails for one that exists, and the commands after it still apply.
    """
    lines = []
    for role in SERVICE_ROLES:
        name = user_name(topology.namespace, role)
        if name in passwords:
            lines.append(shlex.join(["rabbitmqctl", "add_user", name, passwords[name]]))
        allowed = permissions(topology, role)
        lines.append(
            shlex.join(
                [
                    "rabbitmqctl",
                    "set_permissions",
                    "-p",
                    vhost,
                    name,
                    allowed.configure,
                    allowed.write,
                    allowed.read,
                ]
            )
        )
    policy = queue_policy(topology)
    lines.append(
        shlex.join(
            [
                "rabbitmqctl",
                "set_policy",
                "-p",
                vhost,
                "--apply-to",
                policy["apply-to"],
                "--priority",
                str(policy["priority"]),
                policy_name(topology),
                policy["pattern"],
                json.dumps(policy["definition"], separators=(",", ":")),
            ]
        )
    )
    return lines


@dataclass(frozen=True)
class LocalRoles:
    """The AMQP URLs of a broker set up for one installation on this machine."""

    services: dict[str, str]
    """Each service's URL, by service name (``decider``, ``http-adapter``, ...)."""
    worker: str
    """A worker user's URL, serving every task but the built-in ones."""
    client: str
    """A client user's URL."""


def saved_password(namespace: str, key: str, user: str) -> str | None:
    """The password of ``user`` in the login saved under ``key`` (a service role,
    ``worker`` or ``client``) for ``namespace``; None when none is saved for that user."""
    url = saved_broker_url(namespace, key)
    if url is None or login_of(url) != user:
        return None
    return unquote(urlsplit(first_node(url)).password or "") or None


def save_logins(namespace: str, logins: Mapping[str, str]) -> str:
    """Keep each login (an AMQP URL, by service role, ``worker`` or ``client``) where
    ``orbit service``, ``orbit worker`` and AmqpClient find them; the file's path."""
    path = ""
    for key, url in logins.items():
        path = str(save_broker_url(namespace, key, url))
    return path


def saved_service_logins(settings: Settings, names: Iterable[str]) -> dict[str, str]:
    """The AMQP URL of each service named that ``ORBIT_AMQP_URL`` does not log in as
    its role's user, and that has a login saved (``orbit broker setup --save``, ``orbit
    dev``): the saved user and password on ``ORBIT_AMQP_URL``'s nodes. Empty with
    ``ORBIT_BROKER_AUTH=shared``."""
    if settings.broker_auth != "roles":
        return {}
    namespace = settings.namespace
    logins = {}
    for name in names:
        user = user_name(namespace, Role(name)) if name in SERVICE_ROLES else None
        if user is None or login_of(settings.amqp_url) == user:
            continue
        password = saved_password(namespace, name, user)
        if password is not None:
            logins[name] = with_login(settings.amqp_url, user, password)
    return logins


async def provision_local_roles(
    settings: Settings, label: str = "dev", *, rotate: bool = False
) -> LocalRoles:
    """Set up every role, plus a worker and a client user named ``label``, as ``orbit
    dev`` does on the local broker, and save their logins in the credentials file.

    A user keeps the password saved for it (it is set again, so a user deleted since
    comes back with it); one with none saved, or every one with ``rotate``, gets a
    new password. A process still logged in with a replaced password is refused
    when it reconnects, so passwords change only when asked.

    Raises:
        OrbitError: ``UNAVAILABLE`` when the management API does not answer.
    """
    namespace = settings.namespace
    topology = Topology(namespace, settings.decider_partitions)

    def kept(key: str, user: str) -> str | None:
        return None if rotate else saved_password(namespace, key, user)

    passwords = {
        role: kept(str(role), user_name(namespace, role)) or new_password()
        for role in SERVICE_ROLES
    }
    async with BrokerAdmin.from_settings(settings) as admin:
        await setup(admin, topology, passwords)
        logins = {
            str(role): (user_name(namespace, role), passwords[role]) for role in SERVICE_ROLES
        }
        for role, tasks in ((Role.WORKER, ["*"]), (Role.CLIENT, [])):
            user = user_name(namespace, role, label)
            logins[str(role)] = await add_user(
                admin, topology, role, label, tasks=tasks, password=kept(str(role), user)
            )
    urls = {key: with_login(settings.amqp_url, *login) for key, login in logins.items()}
    save_logins(namespace, urls)
    worker, client = urls.pop(str(Role.WORKER)), urls.pop(str(Role.CLIENT))
    return LocalRoles(urls, worker, client)
