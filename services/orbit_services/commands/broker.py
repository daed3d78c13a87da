"""``orbit broker setup|user``: RabbitMQ users per role, through the management API.

Like ``orbit token``, these run before (and beside) any service: they need
``ORBIT_AMQP_URL`` (for the namespace's broker and vhost) and an
administrator's login on the management API (``ORBIT_BROKER_ADMIN_URL``, or
``ORBIT_AMQP_URL``'s own). A password is printed once, alone on stdout, so
``PW=$(orbit broker user add …)`` works; what else they say goes to stderr.
"""

from __future__ import annotations

import json
import os
import sys
from typing import TYPE_CHECKING, Annotated, Any

import typer

from orbit_sdk.cli.hints import orbit_command
from orbit_services.commands.settings import server_settings

if TYPE_CHECKING:
    from orbit_model.broker_roles import Role
    from orbit_model.topology import Topology
    from orbit_services.commands.broker_setup import BrokerAdmin
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


def _with_admin(settings: Settings, work: Any) -> Any:
    from orbit_sdk.cli.common import run  # noqa: PLC0415
    from orbit_services.commands.broker_setup import BrokerAdmin  # noqa: PLC0415

    async def go() -> Any:
        async with BrokerAdmin.from_settings(settings) as admin:
            return await work(admin)

    return run(go())


def _note(line: str) -> None:
    sys.stderr.write(line + "\n")


AsJson = Annotated[bool, typer.Option("--json", help="Print what was done as JSON.")]
Save = Annotated[
    bool,
    typer.Option(
        "--save",
        help="Keep the logins in the credentials file (ORBIT_CREDENTIALS), where `orbit"
        " service`, `orbit worker` and AmqpClient find them, instead of printing passwords.",
    ),
]


Show = Annotated[
    bool,
    typer.Option(
        "--print", help="Print the rabbitmqctl commands instead of calling the management API."
    ),
]
Rotate = Annotated[
    list[str] | None,
    typer.Option("--rotate", help="Give this service role's user a new password (repeat)."),
]
Tasks = Annotated[
    list[str] | None,
    typer.Option(
        "--tasks", help="A worker's tasks: a name or a pattern such as 'payments.*' (repeat)."
    ),
]
PrintUrl = Annotated[
    bool, typer.Option("--url", help="Print the whole ORBIT_AMQP_URL, not the password.")
]
PasswordEnv = Annotated[
    str | None,
    typer.Option(
        "--password-env",
        help="Set the password held by this environment variable (and print nothing).",
    ),
]


@broker_app.command("setup")
def setup_command(
    show: Show = False,
    rotate: Rotate = None,
    save: Save = False,
    as_json: AsJson = False,
) -> None:
    """Make the service users, their permissions and the queue policy (idempotent).

    A user made now (or rotated) has its password printed once, as ``USER PASSWORD``;
    one that exists keeps its own. ORBIT_BROKER_PASSWORD_<ROLE> (GATEWAY, DECIDER,
    DISPATCHER, TIMER, HTTP_ADAPTER) sets a role's password instead. With --save the
    logins are kept in the credentials file, and a saved password is kept (set again).
    """
    from orbit_model.broker_roles import SERVICE_ROLES, Role  # noqa: PLC0415
    from orbit_model.topology import Topology  # noqa: PLC0415

    settings = server_settings()
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
        _print_commands(settings, topology, given, as_json)
    else:
        _setup(settings, given, rotating, save=save, as_json=as_json)


def _setup(
    settings: Settings, given: dict[Role, str], rotating: list[Role], *, save: bool, as_json: bool
) -> None:
    from orbit_model.broker_roles import SERVICE_ROLES, user_name  # noqa: PLC0415
    from orbit_model.topology import Topology  # noqa: PLC0415
    from orbit_sdk.amqp_nodes import with_login  # noqa: PLC0415
    from orbit_services.commands.broker_setup import save_logins, saved_password, setup  # noqa: PLC0415

    namespace = settings.namespace
    topology = Topology(namespace, settings.decider_partitions)
    # With --save, the passwords saved before are kept: they are the ones the services
    # started from the credentials file log in with.
    saved = {
        role: password
        for role in SERVICE_ROLES
        if save
        and role not in {*given, *rotating}
        and (password := saved_password(namespace, role, user_name(namespace, role)))
    }
    roles = {user_name(namespace, role): role for role in SERVICE_ROLES}

    async def work(admin: BrokerAdmin) -> tuple[Any, str]:
        return await setup(admin, topology, {**saved, **given}, rotating), admin.vhost

    result, vhost = _with_admin(settings, work)
    saved_in = None
    if save:
        saved_in = save_logins(
            namespace,
            {
                str(roles[name]): with_login(settings.amqp_url, name, password)
                for name, password in result.passwords.items()
            },
        )
    users = [
        {
            "user": name,
            "role": str(role),
            "state": (state := _state(name in result.kept, role in given, role in saved)),
            "password": result.passwords[name] if state == "new" and not save else None,
        }
        for name, role in roles.items()
    ]
    if as_json:
        print(json.dumps({"vhost": vhost, "users": users, "saved_in": saved_in}, indent=2))
        return
    _report_setup(users, saved_in, save)
    _note(
        f"the users of namespace {namespace!r} and the policy"
        f" {topology.namespace}.queues are set up on vhost {vhost!r}"
    )


def _state(kept: bool, from_environment: bool, saved: bool) -> str:
    """What ``setup`` did with a service user's password."""
    if kept:
        return "kept"
    if from_environment:
        return "environment"
    return "saved" if saved else "new"


def _report_setup(users: list[dict[str, Any]], saved_in: str | None, save: bool) -> None:
    """Each user's password, or what became of it: on stdout a new password (alone
    with its user's name), on stderr the rest."""
    for user in users:
        name, state = user["user"], user["state"]
        if user["password"] is not None:
            print(f"{name} {user['password']}")
        elif state == "kept" and save:
            _note(
                f"{name}: exists, password kept but not known here, so not saved:"
                f" `{orbit_command()} broker setup --save --rotate {user['role']}` gives it one"
            )
        elif state == "kept":
            _note(f"{name}: exists, password kept")
        elif state == "saved":
            _note(f"{name}: password kept (the one saved in {saved_in})")
        else:
            what = "set from the environment" if state == "environment" else "new"
            _note(f"{name}: password {what}" + (f", saved in {saved_in}" if saved_in else ""))


def _print_commands(
    settings: Settings, topology: Topology, given: dict[Role, str], as_json: bool
) -> None:
    from orbit_model.broker_roles import SERVICE_ROLES, user_name  # noqa: PLC0415
    from orbit_sdk.amqp_nodes import vhost_of  # noqa: PLC0415
    from orbit_services.commands.broker_setup import new_password, rabbitmqctl_commands  # noqa: PLC0415

    passwords = {
        user_name(settings.namespace, role): given.get(role) or new_password()
        for role in SERVICE_ROLES
    }
    commands = rabbitmqctl_commands(topology, vhost_of(settings.amqp_url), passwords)
    if as_json:
        print(json.dumps({"commands": commands}, indent=2))
    else:
        for line in commands:
            print(line)
    _note("add_user fails for a user that exists (it keeps its password); the rest applies")


@user_app.command("add")
def add_command(
    name: Annotated[str, typer.Argument(help="The user's name within its role.")],
    *,
    role: Annotated[str, typer.Option("--role", help="worker or client.")],
    tasks: Tasks = None,
    url: PrintUrl = False,
    password_env: PasswordEnv = None,
    save: Save = False,
    as_json: AsJson = False,
) -> None:
    """Make a worker or client user NS.ROLE.NAME and print its new password once.

    Run again for a user that exists, it gets a new password (and the permissions
    given). With --save its login is kept as this namespace's worker (or client) login
    in the credentials file, and nothing is printed.
    """
    from orbit_model.broker_roles import Role  # noqa: PLC0415
    from orbit_model.topology import Topology  # noqa: PLC0415
    from orbit_sdk.amqp_nodes import with_login  # noqa: PLC0415
    from orbit_services.commands.broker_setup import add_user, save_logins  # noqa: PLC0415

    settings = server_settings()
    chosen = _named_role(role)
    topology = Topology(settings.namespace, settings.decider_partitions)
    patterns = [part.strip() for value in tasks or () for part in value.split(",") if part]
    if chosen is Role.WORKER and not patterns:
        _note("a worker user needs --tasks (a name or a pattern such as 'payments.*')")
        raise typer.Exit(2)
    given = None if password_env is None else _password_in(password_env)

    async def work(admin: BrokerAdmin) -> tuple[str, str]:
        try:
            return await add_user(
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

    user, password = _with_admin(settings, work)
    if chosen is Role.WORKER:  # for the dispatcher's check at registration
        from orbit_services.commands.worker_tasks import record_tasks  # noqa: PLC0415

        record_tasks(settings, user, patterns)
    login = with_login(settings.amqp_url, user, password)
    saved_in = save_logins(settings.namespace, {str(chosen): login}) if save else None
    shown = None if given is not None or save else (password, login)
    _report_added(user, chosen, shown, saved_in, password_env, url=url, as_json=as_json)


def _report_added(
    user: str,
    role: Role,
    shown: tuple[str, str] | None,
    saved_in: str | None,
    password_env: str | None,
    *,
    url: bool,
    as_json: bool,
) -> None:
    """What ``user add`` did: the password (or URL) alone on stdout, the rest on stderr;
    ``shown`` is the password and URL to show (None: given, or saved)."""
    password, login = shown or (None, None)
    if as_json:
        answer = {"user": user, "password": password, "url": login, "saved_in": saved_in}
        print(json.dumps(answer, indent=2))
    elif saved_in is not None:
        _note(f"{user} may log in; its login is saved in {saved_in} (`orbit {role}` uses it)")
    elif shown is None:
        _note(f"{user} may log in with the password of ${password_env}")
    else:
        _note(f"{user} may log in; its password is shown this once")
        print(login if url else password)


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
    as_json: AsJson = False,
) -> None:
    """Delete the worker or client user NS.ROLE.NAME: it can log in no more."""
    from orbit_model.broker_roles import Role, user_name  # noqa: PLC0415

    settings = server_settings()
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
        if as_json:
            print(json.dumps({"user": user, "deleted": True}, indent=2))
        else:
            _note(f"{user} deleted")

    _with_admin(settings, work)
    if chosen is Role.WORKER:
        from orbit_services.commands.worker_tasks import forget_tasks  # noqa: PLC0415

        forget_tasks(settings, user)
