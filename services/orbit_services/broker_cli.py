"""``orbit broker setup|user``: RabbitMQ users per role, through the management API.

Like ``orbit token``, these run before (and beside) any service: they need
``ORBIT_AMQP_URL`` (for the namespace's broker and vhost) and an
administrator's login on the management API (``ORBIT_BROKER_ADMIN_URL``, or
``ORBIT_AMQP_URL``'s own). A password is printed once, alone on stdout, so
``PW=$(orbit broker user add …)`` works; what else they say goes to stderr.
"""

from __future__ import annotations

import os
import sys
from typing import TYPE_CHECKING, Annotated, Any

import typer

if TYPE_CHECKING:
    from orbit_model.broker_roles import Role
    from orbit_model.topology import Topology
    from orbit_services.broker_setup import BrokerAdmin
    from orbit_services.runtime.settings import Settings

broker_app = typer.Typer(
    name="broker",
    help="Set up RabbitMQ's users per role (docs/security.md).",
    no_args_is_help=True,
    rich_markup_mode=None,
)
user_app = typer.Typer(
    name="user", help="Add or delete a worker or client user.", no_args_is_help=True
)
broker_app.add_typer(user_app)

MIN_PASSWORD_LENGTH = 16
"""The shortest password taken from the environment (a generated one has 32 characters)."""
PASSWORD_VARIABLE = "ORBIT_BROKER_PASSWORD_{}"
"""Where ``setup`` finds a service user's password to set (``…_HTTP_ADAPTER``)."""


def _settings() -> Settings:
    from orbit_services.cli import server_settings  # noqa: PLC0415

    return server_settings()


def _with_admin(settings: Settings, work: Any) -> Any:
    from orbit_sdk.cli.common import run  # noqa: PLC0415
    from orbit_services.broker_setup import BrokerAdmin  # noqa: PLC0415

    async def go() -> Any:
        async with BrokerAdmin.from_settings(settings) as admin:
            return await work(admin)

    return run(go())


def _note(line: str) -> None:
    sys.stderr.write(line + "\n")


@broker_app.command("setup")
def setup_command(
    show: Annotated[
        bool,
        typer.Option(
            "--print", help="Print the rabbitmqctl commands instead of calling the management API."
        ),
    ] = False,
    rotate: Annotated[
        list[str] | None,
        typer.Option("--rotate", help="Give this service role's user a new password (repeat)."),
    ] = None,
) -> None:
    """Make the service users, their permissions and the queue policy (idempotent).

    A user made now (or rotated) has its password printed once, as ``USER PASSWORD``;
    one that exists keeps its own. ORBIT_BROKER_PASSWORD_<ROLE> (GATEWAY, DECIDER,
    DISPATCHER, TIMER, HTTP_ADAPTER) sets a role's password instead.
    """
    from orbit_model.broker_roles import SERVICE_ROLES, Role, user_name  # noqa: PLC0415
    from orbit_model.topology import Topology  # noqa: PLC0415
    from orbit_services.broker_setup import setup  # noqa: PLC0415

    settings = _settings()
    topology = Topology(settings.namespace, settings.decider_partitions)
    rotating = [Role(name) for name in rotate or () if name in SERVICE_ROLES]
    if len(rotating) != len(rotate or ()):
        _note(f"--rotate takes a service role: {', '.join(SERVICE_ROLES)}")
        raise typer.Exit(2)
    given = {
        role: os.environ[variable]
        for role in SERVICE_ROLES
        if (variable := PASSWORD_VARIABLE.format(role.upper().replace("-", "_"))) in os.environ
    }
    if show:
        _print_commands(settings, topology, given)
        return

    generated = {user_name(settings.namespace, role) for role in SERVICE_ROLES if role not in given}

    async def work(admin: BrokerAdmin) -> None:
        result = await setup(admin, topology, given, rotating)
        for name in result.kept:
            _note(f"{name}: exists, password kept")
        for name, password in result.passwords.items():
            if name in generated:
                print(f"{name} {password}")
            else:
                _note(f"{name}: password set from the environment")
        _note(
            f"the users of namespace {settings.namespace!r} and the policy"
            f" {topology.namespace}.queues are set up on vhost {admin.vhost!r}"
        )

    _with_admin(settings, work)


def _print_commands(settings: Settings, topology: Topology, given: dict[Role, str]) -> None:
    from orbit_model.broker_roles import SERVICE_ROLES, user_name  # noqa: PLC0415
    from orbit_sdk.amqp_nodes import vhost_of  # noqa: PLC0415
    from orbit_services.broker_setup import new_password, rabbitmqctl_commands  # noqa: PLC0415

    passwords = {
        user_name(settings.namespace, role): given.get(role) or new_password()
        for role in SERVICE_ROLES
    }
    for line in rabbitmqctl_commands(topology, vhost_of(settings.amqp_url), passwords):
        print(line)
    _note("add_user fails for a user that exists (it keeps its password); the rest applies")


@user_app.command("add")
def add_command(
    name: Annotated[str, typer.Argument(help="The user's name within its role.")],
    role: Annotated[str, typer.Option("--role", help="worker or client.")],
    tasks: Annotated[
        list[str] | None,
        typer.Option(
            "--tasks",
            help="A worker's tasks: a name or a pattern such as 'payments.*' (repeat).",
        ),
    ] = None,
    url: Annotated[
        bool, typer.Option("--url", help="Print the whole ORBIT_AMQP_URL, not the password.")
    ] = False,
    password_env: Annotated[
        str | None,
        typer.Option(
            "--password-env",
            help="Set the password held by this environment variable (and print nothing).",
        ),
    ] = None,
) -> None:
    """Make a worker or client user NS.ROLE.NAME and print its new password once.

    Run again for a user that exists, it gets a new password (and the permissions given).
    """
    from orbit_model.broker_roles import Role  # noqa: PLC0415
    from orbit_model.topology import Topology  # noqa: PLC0415
    from orbit_sdk.amqp_nodes import with_login  # noqa: PLC0415
    from orbit_services.broker_setup import add_user  # noqa: PLC0415

    settings = _settings()
    chosen = _named_role(role)
    topology = Topology(settings.namespace, settings.decider_partitions)
    patterns = [part.strip() for value in tasks or () for part in value.split(",") if part]
    if chosen is Role.WORKER and not patterns:
        _note("a worker user needs --tasks (a name or a pattern such as 'payments.*')")
        raise typer.Exit(2)
    given = None if password_env is None else _password_in(password_env)

    async def work(admin: BrokerAdmin) -> None:
        try:
            user, password = await add_user(
                admin,
                topology,
                chosen,
                name,
                tasks=patterns if chosen is Role.WORKER else (),
                password=given,
            )
        except ValueError as error:
            _note(str(error))
            raise typer.Exit(2) from None
        if given is not None:
            _note(f"{user} may log in with the password of ${password_env}")
            return
        _note(f"{user} may log in; its password is shown this once")
        print(with_login(settings.amqp_url, user, password) if url else password)

    _with_admin(settings, work)


def _named_role(role: str) -> Role:
    from orbit_model.broker_roles import NAMED_ROLES, Role  # noqa: PLC0415

    if role not in NAMED_ROLES:
        _note(f"--role is one of: {', '.join(NAMED_ROLES)}")
        raise typer.Exit(2)
    return Role(role)


def _password_in(variable: str) -> str:
    password = os.environ.get(variable, "")
    if len(password) < MIN_PASSWORD_LENGTH:
        _note(f"${variable} must hold a password of {MIN_PASSWORD_LENGTH}+ characters")
        raise typer.Exit(2)
    return password


@user_app.command("delete")
def delete_command(
    name: Annotated[str, typer.Argument(help="The user's name within its role.")],
    role: Annotated[str, typer.Option("--role", help="worker or client.")],
) -> None:
    """Delete the worker or client user NS.ROLE.NAME: it can log in no more."""
    from orbit_model.broker_roles import user_name  # noqa: PLC0415

    settings = _settings()
    chosen = _named_role(role)
    try:
        user = user_name(settings.namespace, chosen, name)
    except ValueError as error:
        _note(str(error))
        raise typer.Exit(2) from None

    async def work(admin: BrokerAdmin) -> None:
        if not await admin.delete_user(user):
            _note(f"there is no user {user}")
            raise typer.Exit(1)
        _note(f"{user} deleted")

    _with_admin(settings, work)
