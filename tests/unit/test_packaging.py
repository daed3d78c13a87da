"""The container packaging (Dockerfile, .dockerignore, compose.yaml) agrees with the code.

No Docker and no network: each test reads the files and holds them against
the real settings, services and command line, so a renamed setting, a new
service or a changed command fails here rather than in a container.
"""

from __future__ import annotations

import importlib
import json
import os
import re
import runpy
import tomllib
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from functools import cache
from pathlib import Path, PurePosixPath
from typing import Any
from urllib.parse import urlsplit

import pytest
import typer
import yaml
from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet
from packaging.utils import canonicalize_name
from packaging.version import Version
from typer.testing import CliRunner

from orbit_model import compile_definition
from orbit_model.broker_roles import SERVICE_ROLES, Role, user_name
from orbit_model.inputs import start_execution
from orbit_model.names import EXECUTION_ID
from orbit_sdk.cli.app import build_app
from orbit_sdk.worker import Worker
from orbit_services.commands.broker import MIN_PASSWORD_LENGTH, PASSWORD_VARIABLE
from orbit_services.runner import SERVICES
from orbit_services.runtime.settings import Settings, SettingsError, load_settings

app = build_app()

ROOT = Path(__file__).parents[2]
COMPOSE_FILE = ROOT / "compose.yaml"
DOCKERFILE = ROOT / "Dockerfile"
DOCKERIGNORE = ROOT / ".dockerignore"
PREFIX = str(Settings.model_config.get("env_prefix", ""))
SETTING_NAMES = {PREFIX + name.upper() for name in Settings.model_fields}
# Read by the orbit command line, not by the services' settings.
CLIENT_VARIABLES = {"ORBIT_URL", "ORBIT_TOKEN", "ORBIT_CREDENTIALS"}
# The password of each role's RabbitMQ user (RABBITMQ_PASSWORD is the administrator's).
BROKER_SECRETS = {
    Role.GATEWAY: "RABBITMQ_GATEWAY_PASSWORD",
    Role.DECIDER: "RABBITMQ_DECIDER_PASSWORD",
    Role.DISPATCHER: "RABBITMQ_DISPATCHER_PASSWORD",
    Role.TIMER: "RABBITMQ_TIMER_PASSWORD",
    Role.HTTP_ADAPTER: "RABBITMQ_HTTP_ADAPTER_PASSWORD",
    Role.WORKER: "RABBITMQ_WORKER_PASSWORD",
    Role.CLIENT: "RABBITMQ_CLIENT_PASSWORD",
}
# compose.yaml has no default for a secret: `make compose-secrets` draws each.
SECRETS = {"POSTGRES_PASSWORD", "RABBITMQ_PASSWORD", "ORBIT_ADMIN_TOKEN", *BROKER_SECRETS.values()}
SECRET_VALUES = {
    "POSTGRES_PASSWORD": "pg-secret",
    "RABBITMQ_PASSWORD": "mq-secret",
    "ORBIT_ADMIN_TOKEN": "orbit_" + "t" * 43,
    # A value of its own each (so a service with another's password fails), long
    # enough for `orbit broker user add --password-env`.
    **{secret: f"mq-{role.name.lower()}-" + "p" * 16 for role, secret in BROKER_SECRETS.items()},
}
# What `orbit broker setup` reads: the password of each service role's user.
BROKER_PASSWORD_VARIABLES = {
    role: PASSWORD_VARIABLE.format(role.upper().replace("-", "_")) for role in SERVICE_ROLES
}
# The RabbitMQ user (NS.worker.NAME) each worker of the stack logs in as.
WORKER_USERS = {"examples.workers:worker": "examples"}
# Which commands use the database, and which the broker: a container gets no other URL.
USES_DATABASE = {"migrate", "token", "service"}
"""Commands that use Postgres, besides ``broker user add|delete --role worker`` (which
records a worker user's task patterns there)."""
USES_BROKER = {"service", "worker", "broker"}


# -- reading compose.yaml ----------------------------------------------------------

_INTERPOLATION = re.compile(
    r"\$(?:(?P<escaped>\$)|\{(?P<braced>[^}]*)\}|(?P<bare>[A-Za-z_][A-Za-z0-9_]*)|(?P<bad>))"
)
_BRACED = re.compile(r"(?P<name>[A-Za-z_][A-Za-z0-9_]*)(?:(?P<op>:?[-?+])(?P<default>.*))?", re.S)


def interpolate(text: str) -> str:
    """``text`` as Compose reads it with only the secrets set (the .env of
    ``make compose-secrets``): each ``${NAME:-default}`` its default, each secret's
    ``${NAME:?message}`` the value of :data:`SECRET_VALUES`.

    Any other variable without a default (``$NAME``, ``${NAME}``,
    ``${NAME:?message}``) fails the test: ``docker compose up`` must need
    nothing but the secrets.
    """

    def replace(match: re.Match[str]) -> str:
        if match["escaped"]:
            return "$"
        if match["bad"] is not None:
            raise AssertionError(f"{text!r}: a lone $ (write $$ for a literal one)")
        if match["bare"]:
            raise AssertionError(f"{text!r}: ${match['bare']} has no default")
        braced = _BRACED.fullmatch(match["braced"])
        assert braced is not None, f"{text!r}: cannot read ${{{match['braced']}}}"
        if braced["name"] in SECRETS:
            assert braced["op"] == ":?", f"{text!r}: a secret must not have a default"
            return SECRET_VALUES[braced["name"]]
        assert braced["op"] in (":-", "-"), f"{text!r}: ${{{braced['name']}}} has no default"
        return interpolate(braced["default"])

    return _INTERPOLATION.sub(replace, text)


def _resolved(node: Any) -> Any:
    if isinstance(node, str):
        return interpolate(node)
    if isinstance(node, dict):
        return {key: _resolved(value) for key, value in node.items()}
    if isinstance(node, list):
        return [_resolved(value) for value in node]
    return node


@cache
def compose() -> dict[str, Any]:
    """compose.yaml, parsed (merge keys applied) and interpolated with no variables set."""
    document = yaml.safe_load(COMPOSE_FILE.read_text(encoding="utf-8"))
    assert isinstance(document, dict)
    resolved: dict[str, Any] = _resolved(document)
    return resolved


def services() -> dict[str, dict[str, Any]]:
    found: dict[str, dict[str, Any]] = compose()["services"]
    return found


def orbit_containers() -> dict[str, dict[str, Any]]:
    """The services built from this repository's Dockerfile."""
    return {name: spec for name, spec in services().items() if "build" in spec}


def collected(names: Callable[[], Iterable[str]]) -> list[str]:
    """``names()`` for a parametrize list; a compose.yaml that does not load gives one
    name that fails each test with the reason, rather than an error collecting them all."""
    try:
        return sorted(names())
    except Exception:
        return ["(compose.yaml does not load)"]


def command_of(spec: dict[str, Any]) -> list[str]:
    command = spec.get("command", [])
    assert isinstance(command, list), f"use the exec form for commands: {command!r}"
    assert all(isinstance(part, str) for part in command), command
    return command


def environment_of(spec: dict[str, Any]) -> dict[str, str]:
    raw = spec.get("environment", {})
    if isinstance(raw, list):
        raw = dict(item.split("=", 1) for item in raw)
    for key, value in raw.items():
        # A bare `true` or `8080` would reach the container as YAML's idea of it.
        assert isinstance(value, str), f"{key}: quote the value ({value!r})"
    return dict(raw)


def depends_on(spec: dict[str, Any]) -> dict[str, str]:
    """Each service this one waits for, with the condition it waits for."""
    raw = spec.get("depends_on", {})
    if isinstance(raw, list):
        return dict.fromkeys(raw, "service_started")
    return {name: (entry or {}).get("condition", "service_started") for name, entry in raw.items()}


def waits_for(name: str) -> set[str]:
    """Every service ``name`` waits for, directly or through others."""
    seen: set[str] = set()
    todo = [name]
    while todo:
        for dependency in depends_on(services()[todo.pop()]):
            if dependency not in seen:
                seen.add(dependency)
                todo.append(dependency)
    return seen


def host_ports(spec: dict[str, Any]) -> list[tuple[str | None, int]]:
    """(published host port or None, container port) of each entry of ``ports``."""
    found = []
    for entry in spec.get("ports", []):
        if isinstance(entry, dict):
            published = entry.get("published")
            found.append((None if published is None else str(published), int(entry["target"])))
            continue
        parts = str(entry).split("/")[0].rsplit(":", 2)
        target = int(parts[-1])
        found.append((parts[-2] or None, target) if len(parts) > 1 else (None, target))
    return found


def settings_of(spec: dict[str, Any], monkeypatch: pytest.MonkeyPatch) -> Settings:
    """The settings a container of ``spec`` starts with: the image's ENV, then compose's."""
    for name in list(os.environ):
        if name.startswith(PREFIX):
            monkeypatch.delenv(name)
    for name, value in {**dockerfile().env, **environment_of(spec)}.items():
        monkeypatch.setenv(name, value)
    try:
        return load_settings()
    except SettingsError as error:
        raise AssertionError(str(error)) from None


def orbit_command(args: list[str]) -> Any:
    """Parse ``orbit ARGS`` as the real command line does (types, required arguments), or fail.

    Returns the command's context: ``.info_name`` is the command, ``.params`` its values.
    """
    assert args, "no command"
    group: Any = typer.main.get_command(app)
    parent = group.make_context("orbit", [], resilient_parsing=True)
    command = group.get_command(parent, args[0])
    assert command is not None, f"`orbit {args[0]}` is not a command"
    while hasattr(command, "get_command") and len(args) > 1:  # a group: `orbit token create`
        parent = command.make_context(args[0], [], parent=parent, resilient_parsing=True)
        args = args[1:]
        command = command.get_command(parent, args[0])
        assert command is not None, f"`{args[0]}` is not a subcommand"
    try:
        return command.make_context(args[0], list(args[1:]), parent=parent)
    except typer.TyperException as error:  # the usage errors of typer's click
        raise AssertionError(f"orbit {' '.join(args)}: {error}") from None


# -- reading the Dockerfile ------------------------------------------------------


@dataclass(frozen=True)
class Instruction:
    keyword: str
    argument: str

    def exec_form(self) -> list[str]:
        value = json.loads(self.argument)
        assert isinstance(value, list), f"{self.keyword} must use the exec (JSON) form"
        return value


@dataclass(frozen=True)
class Dockerfile:
    instructions: list[Instruction]

    def all(self, keyword: str) -> list[Instruction]:
        return [item for item in self.instructions if item.keyword == keyword]

    def last(self, keyword: str) -> Instruction:
        found = self.all(keyword)
        assert found, f"the Dockerfile has no {keyword}"
        return found[-1]

    @property
    def env(self) -> dict[str, str]:
        values: dict[str, str] = {}
        for item in self.all("ENV"):
            for pair in re.findall(r"(\S+?)=(\"[^\"]*\"|\S+)", item.argument):
                values[pair[0]] = pair[1].strip('"')
        return values

    def copies(self) -> Iterator[tuple[list[str], str]]:
        """(sources, destination) of each COPY/ADD from the build context."""
        for item in self.all("COPY") + self.all("ADD"):
            words = [word for word in item.argument.split() if not word.startswith("--")]
            if "--from=" in item.argument:
                continue
            *sources, destination = words
            yield sources, destination


@cache
def dockerfile() -> Dockerfile:
    logical: list[str] = []
    pending = ""
    for line in DOCKERFILE.read_text(encoding="utf-8").splitlines():
        stripped = line.strip()
        if not stripped or stripped.startswith("#"):
            continue
        if stripped.endswith("\\"):
            pending += stripped[:-1] + " "
            continue
        logical.append(pending + stripped)
        pending = ""
    assert not pending, "the Dockerfile ends in a line continuation"
    instructions = []
    for line in logical:
        keyword, _, argument = line.partition(" ")
        instructions.append(Instruction(keyword.upper(), argument.strip()))
    return Dockerfile(instructions)


def workdir() -> PurePosixPath:
    return PurePosixPath(dockerfile().last("WORKDIR").argument)


def in_image(destination: str) -> PurePosixPath:
    path = PurePosixPath(destination)
    return path if path.is_absolute() else workdir() / path


# -- reading .dockerignore ---------------------------------------------------------


def _pattern(pattern: str) -> re.Pattern[str]:
    out = ""
    index = 0
    while index < len(pattern):
        if pattern.startswith("**/", index):
            out += "(?:.*/)?"
            index += 3
        elif pattern.startswith("**", index):
            out += ".*"
            index += 2
        elif pattern[index] == "*":
            out += "[^/]*"
            index += 1
        elif pattern[index] == "?":
            out += "[^/]"
            index += 1
        else:
            out += re.escape(pattern[index])
            index += 1
    return re.compile(out)


@cache
def ignore_rules() -> list[tuple[bool, re.Pattern[str]]]:
    rules = []
    for raw in DOCKERIGNORE.read_text(encoding="utf-8").splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        keep = line.startswith("!")
        cleaned = str(PurePosixPath(line.removeprefix("!").strip().lstrip("/")))
        rules.append((keep, _pattern(cleaned)))
    return rules


@cache
def distributions() -> dict[str, dict[str, Any]]:
    """Each distribution's directory and its pyproject.toml, from the workspace's members."""
    workspace = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    members = workspace["tool"]["uv"]["workspace"]["members"]
    return {
        member: tomllib.loads((ROOT / member / "pyproject.toml").read_text(encoding="utf-8"))
        for member in members
    }


def ignored(path: str) -> bool:
    """Whether .dockerignore leaves ``path`` (relative to the repository) out of the context."""
    parts = PurePosixPath(path).parts
    excluded = False
    # A directory left out takes everything under it along (the last matching rule wins).
    for depth in range(1, len(parts) + 1):
        prefix = "/".join(parts[:depth])
        for keep, pattern in ignore_rules():
            if pattern.fullmatch(prefix):
                excluded = not keep
    return excluded


# -- compose: which containers run what ------------------------------------------


def test_compose_has_the_infrastructure_and_the_one_shots() -> None:
    assert {"postgres", "rabbitmq", "migrate", "broker-setup", "example-worker", "demo"} <= set(
        services()
    )
    assert services()["postgres"]["image"].startswith("postgres:15")
    assert services()["rabbitmq"]["image"].startswith("rabbitmq:3.13")
    assert command_of(services()["migrate"]) == ["migrate"]


def test_every_service_of_the_runner_has_its_own_container() -> None:
    ran: dict[str, list[str]] = {}
    for name, spec in orbit_containers().items():
        command = command_of(spec)
        if command[:1] == ["service"]:
            # One service per container, so each can be scaled on its own.
            assert len(command) == 2, f"{name}: {command}"
            ran.setdefault(command[1], []).append(name)
    unknown = set(ran) - set(SERVICES)
    assert not unknown, f"compose runs services the runner does not know: {unknown}"
    missing = set(SERVICES) - set(ran)
    assert not missing, f"services without a container in compose.yaml: {missing}"
    assert all(len(names) == 1 for names in ran.values()), ran


def test_every_orbit_container_builds_this_dockerfile() -> None:
    assert orbit_containers()
    for name, spec in orbit_containers().items():
        build = spec["build"]
        context = build if isinstance(build, str) else build.get("context", ".")
        dockerfile_name = "Dockerfile" if isinstance(build, str) else build.get("dockerfile")
        assert (COMPOSE_FILE.parent / context).resolve() == ROOT, name
        assert (dockerfile_name or "Dockerfile") == DOCKERFILE.name, name
        assert "entrypoint" not in spec, f"{name}: the image's entrypoint is `orbit`"


@pytest.mark.parametrize("name", collected(orbit_containers))
def test_each_command_is_a_valid_orbit_command_line(name: str) -> None:
    orbit_command(command_of(orbit_containers()[name]))


def test_the_example_worker_target_imports(monkeypatch: pytest.MonkeyPatch) -> None:
    command = command_of(services()["example-worker"])
    assert command == ["worker", "examples.workers:worker"]
    module_name, _, attribute = command[1].partition(":")
    # `orbit worker` imports from the working directory; the image's is where examples/ is.
    monkeypatch.syspath_prepend(str(ROOT))
    found = getattr(importlib.import_module(module_name), attribute)
    assert isinstance(found, Worker)
    top = module_name.split(".")[0]
    copied = {in_image(destination) for _, destination in dockerfile().copies()}
    assert workdir() / top in copied, f"the image has no {top}/ in its working directory"


def test_the_command_line_check_refuses_what_orbit_refuses() -> None:
    assert orbit_command(["service", "decider", "timer"]).params["names"] == ["decider", "timer"]
    for bad in (
        ["no-such-command"],
        ["service"],
        ["worker"],
        ["start"],
        ["start", "hello-world", "--timeout", "soon"],
        ["migrate", "--no-such-option"],
    ):
        with pytest.raises(AssertionError):
            orbit_command(bad)


# -- compose: settings -------------------------------------------------------------


def test_the_settings_prefix_is_the_one_compose_uses() -> None:
    assert PREFIX == "ORBIT_"
    assert "ORBIT_DATABASE_URL" in SETTING_NAMES
    assert "ORBIT_AMQP_URL" in SETTING_NAMES


@pytest.mark.parametrize("name", collected(services))
def test_orbit_variables_are_real_settings(name: str) -> None:
    spec = services()[name]
    names = {key for key in environment_of(spec) if key.startswith(PREFIX)}
    known = SETTING_NAMES | CLIENT_VARIABLES
    if command_of(spec)[:2] == ["broker", "setup"]:
        known |= set(BROKER_PASSWORD_VARIABLES.values())  # the passwords it sets
    unknown = names - known
    assert not unknown, f"{name}: not Orbit settings: {sorted(unknown)}"


def test_the_image_sets_only_real_settings() -> None:
    names = {key for key in dockerfile().env if key.startswith(PREFIX)}
    assert not names - SETTING_NAMES, sorted(names - SETTING_NAMES)


def broker_login(command: list[str], namespace: str) -> tuple[str, str]:
    """The RabbitMQ user and password a container running ``orbit COMMAND`` must log in with."""
    if command[0] == "broker":  # makes the users: RabbitMQ's administrator
        rabbitmq_env = environment_of(services()["rabbitmq"])
        return (
            rabbitmq_env.get("RABBITMQ_DEFAULT_USER", "guest"),
            rabbitmq_env.get("RABBITMQ_DEFAULT_PASS", "guest"),
        )
    if command[0] == "service":  # NS.ROLE, made by `orbit broker setup`
        role = Role(command[1])
        return user_name(namespace, role), SECRET_VALUES[BROKER_SECRETS[role]]
    if command[0] == "worker":  # NS.worker.NAME, made by `orbit broker user add`
        assert command[1] in WORKER_USERS, f"which RabbitMQ user is the worker {command[1]}?"
        label = WORKER_USERS[command[1]]
        return user_name(namespace, Role.WORKER, label), SECRET_VALUES[BROKER_SECRETS[Role.WORKER]]
    raise AssertionError(f"`orbit {command[0]}` does not use the broker")


@pytest.mark.parametrize("name", collected(orbit_containers))
def test_each_container_starts_with_valid_settings_of_this_stack(
    name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    spec = orbit_containers()[name]
    command = command_of(spec)
    environment = environment_of(spec)
    settings = settings_of(spec, monkeypatch)
    if not {key for key in environment if key.startswith(PREFIX)} - CLIENT_VARIABLES:
        # Only the client commands go without settings: they take the gateway's --url.
        assert command[0] in {"deploy", "start"}, name
        return

    # Each URL where it is used, and only there.
    has_database = "ORBIT_DATABASE_URL" in environment
    worker_user = command[:2] == ["broker", "user"] and "worker" in command
    uses_database = command[0] in USES_DATABASE or worker_user
    assert has_database == uses_database, f"{name}: ORBIT_DATABASE_URL"
    has_broker = "ORBIT_AMQP_URL" in environment
    assert has_broker == (command[0] in USES_BROKER), f"{name}: ORBIT_AMQP_URL"
    if command[0] != "broker":
        admin_password = SECRET_VALUES["RABBITMQ_PASSWORD"]
        assert not any(admin_password in value for value in environment.values()), (
            f"{name} gets RabbitMQ's administrator password"
        )

    if has_database:
        database = urlsplit(settings.database_url)
        postgres = services()[database.hostname or ""]
        assert postgres["image"].startswith("postgres:"), database.hostname
        assert (database.port or 5432) == 5432
        postgres_env = environment_of(postgres)
        assert database.username == postgres_env.get("POSTGRES_USER", "postgres")
        if postgres_env.get("POSTGRES_HOST_AUTH_METHOD") != "trust":
            assert database.password == postgres_env["POSTGRES_PASSWORD"]

    if has_broker:
        broker = urlsplit(settings.amqp_url)
        rabbitmq = services()[broker.hostname or ""]
        assert rabbitmq["image"].startswith("rabbitmq:"), broker.hostname
        assert (broker.port or 5672) == 5672
        user, password = broker_login(command, settings.namespace)
        assert broker.username == user, f"{name} logs in as {broker.username}, not {user}"
        assert broker.password == password, f"{name}: not the password of {user}"
        if command[0] == "broker":
            # `orbit broker` works through the management API, as the administrator.
            assert rabbitmq["image"].endswith("-management"), rabbitmq["image"]
            admin = urlsplit(settings.broker_admin_url or f"http://{broker.netloc}")
            assert admin.hostname == broker.hostname
            assert (admin.port or 15672) == 15672
            assert (admin.username, admin.password) == (user, password)
        else:
            # Consumers check who sent each message by its user's role.
            assert settings.broker_auth == "roles", name


def test_the_broker_one_shots_make_the_users_the_containers_log_in_as(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    setups = [
        name
        for name, spec in orbit_containers().items()
        if command_of(spec)[:2] == ["broker", "setup"]
    ]
    assert setups == ["broker-setup"]
    setup_env = environment_of(services()["broker-setup"])
    for role, variable in BROKER_PASSWORD_VARIABLES.items():
        # Without it, setup would draw a password no container knows.
        assert setup_env.get(variable) == SECRET_VALUES[BROKER_SECRETS[role]], variable

    made: dict[str, str] = {}  # user: the container that makes it
    for name, spec in orbit_containers().items():
        command = command_of(spec)
        if command[:3] != ["broker", "user", "add"]:
            continue
        params = orbit_command(command).params
        role = Role(params["role"])
        variable = params["password_env"]
        assert variable, f"{name}: --password-env, or the password is drawn and only logged"
        assert environment_of(spec).get(variable) == SECRET_VALUES[BROKER_SECRETS[role]], name
        namespace = settings_of(spec, monkeypatch).namespace
        made[user_name(namespace, role, params["name"])] = name
        assert depends_on(spec).get("broker-setup") == "service_completed_successfully", name
    made_roles = {Role(user.split(".")[1]) for user in made}
    assert made_roles == {Role.WORKER, Role.CLIENT}, made

    for name in long_running():
        spec = services()[name]
        user = urlsplit(settings_of(spec, monkeypatch).amqp_url).username or ""
        maker = made.get(user, "broker-setup")
        # A service or worker started before its user exists cannot log in.
        assert depends_on(spec).get(maker) == "service_completed_successfully", (name, maker)


def test_interpolation_takes_defaults_and_refuses_variables_without_one() -> None:
    assert interpolate("a${X:-b}c$$d${Y-e}") == "ab" + "c$de"
    for bad in ("${X}", "$X", "${X:?set it}", "a $ b"):
        with pytest.raises(AssertionError):
            interpolate(bad)


def test_the_gateway_listens_in_its_container_and_is_published(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    gateway = next(
        spec for spec in orbit_containers().values() if command_of(spec) == ["service", "gateway"]
    )
    settings = settings_of(gateway, monkeypatch)
    assert settings.http_host == "0.0.0.0"
    [(published, target)] = host_ports(gateway)
    assert target == settings.http_port
    assert published == "8080"
    health = " ".join(gateway["healthcheck"]["test"])
    assert f"127.0.0.1:{settings.http_port}/readyz" in health


def test_clients_reach_the_gateway_where_it_listens(monkeypatch: pytest.MonkeyPatch) -> None:
    gateways = [
        name
        for name, spec in orbit_containers().items()
        if command_of(spec) == ["service", "gateway"]
    ]
    port = settings_of(services()[gateways[0]], monkeypatch).http_port
    clients = 0
    for name, spec in orbit_containers().items():
        url = orbit_command(command_of(spec)).params.get("url")
        if not isinstance(url, str):
            continue  # no --url, or `orbit broker user add`'s flag (print the AMQP URL)
        clients += 1
        assert urlsplit(url).hostname in gateways, f"{name}: {url}"
        assert urlsplit(url).port == port, f"{name}: {url}"
        assert "gateway" in waits_for(name), name
    assert clients >= 2  # deploy-examples and demo


def test_the_http_adapter_and_the_deciders_switch_agree(monkeypatch: pytest.MonkeyPatch) -> None:
    by_service = {
        command_of(spec)[1]: spec
        for spec in orbit_containers().values()
        if command_of(spec)[:1] == ["service"]
    }
    enabled = settings_of(by_service["decider"], monkeypatch).http_adapter_enabled
    # An adapter nobody sends work to, or http steps failing ADAPTER_DISABLED beside a running one.
    assert enabled == ("http-adapter" in by_service)


# -- compose: scaling, ports, start order ----------------------------------------


def test_no_container_has_a_fixed_name() -> None:
    named = [name for name, spec in services().items() if "container_name" in spec]
    assert not named, f"container_name stops --scale and a second copy of the stack: {named}"


def test_only_the_gateway_publishes_a_host_port() -> None:
    published = {name for name, spec in services().items() if host_ports(spec)}
    assert len(published) == 1
    assert command_of(services()[published.pop()]) == ["service", "gateway"]


def long_running() -> list[str]:
    """The containers of services and workers: what `docker compose up --scale` multiplies."""
    return sorted(
        name
        for name, spec in orbit_containers().items()
        if command_of(spec)[:1] in (["service"], ["worker"])
    )


def test_the_scalable_services_are_every_service_and_worker_but_the_gateway() -> None:
    scalable = [name for name in long_running() if command_of(services()[name])[1] != "gateway"]
    assert {"decider", "dispatcher", "timer", "example-worker"} <= set(scalable)
    assert len(scalable) == len(SERVICES)  # every service but the gateway, and the worker


@pytest.mark.parametrize("name", collected(long_running))
def test_scalable_services_can_run_several_replicas(name: str) -> None:
    spec = services()[name]
    if command_of(spec) == ["service", "gateway"]:
        return  # it publishes the one host port; more gateways need a load balancer
    assert "container_name" not in spec
    assert not host_ports(spec)
    assert "hostname" not in spec


def test_every_orbit_container_waits_for_the_migration() -> None:
    migrate = "migrate"
    assert depends_on(services()[migrate]) == {"postgres": "service_healthy"}
    for name, spec in orbit_containers().items():
        if name == migrate:
            continue
        assert migrate in waits_for(name), name
        # `orbit token` works on the database alone.
        needs = {"postgres"} if command_of(spec)[0] == "token" else {"postgres", "rabbitmq"}
        assert needs <= waits_for(name), name
    for name, spec in orbit_containers().items():
        if command_of(spec)[:1] in (["service"], ["worker"]):
            assert depends_on(spec)[migrate] == "service_completed_successfully", name
            assert depends_on(spec)["rabbitmq"] == "service_healthy", name


def test_dependencies_exist_have_health_checks_and_form_no_cycle() -> None:
    for name, spec in services().items():
        for dependency, condition in depends_on(spec).items():
            assert dependency in services(), f"{name} waits for unknown {dependency}"
            assert condition in {
                "service_started",
                "service_healthy",
                "service_completed_successfully",
            }, condition
            if condition == "service_healthy":
                assert "healthcheck" in services()[dependency], dependency
            if condition == "service_completed_successfully":
                assert services()[dependency].get("restart", "no") == "no", dependency
        assert name not in waits_for(name), f"{name} waits for itself"


def test_the_infrastructure_health_checks() -> None:
    assert services()["postgres"]["healthcheck"]["test"][1] == "pg_isready"
    assert services()["rabbitmq"]["healthcheck"]["test"][1] == "rabbitmq-diagnostics"


def test_rabbitmq_enables_the_consistent_hash_exchange() -> None:
    rabbitmq = services()["rabbitmq"]
    mounts = {}
    for volume in rabbitmq["volumes"]:
        source, target, *_ = volume.split(":")
        mounts[target] = source
    source = mounts["/etc/rabbitmq/enabled_plugins"]
    path = COMPOSE_FILE.parent / source
    assert path.is_file(), source
    text = path.read_text(encoding="utf-8")
    # An Erlang term: a list of plugin atoms, ended by a full stop.
    listed = re.fullmatch(r"\s*\[([a-z0-9_,\s]*)\]\.\s*", text)
    assert listed is not None, text
    plugins = {plugin.strip() for plugin in listed[1].split(",") if plugin.strip()}
    assert "rabbitmq_consistent_hash_exchange" in plugins
    if rabbitmq["image"].endswith("-management"):
        # The file replaces the image's own, which is what enables the management plugin.
        assert "rabbitmq_management" in plugins


def test_mounts_and_volumes_exist() -> None:
    declared = set(compose().get("volumes") or {})
    for name, spec in services().items():
        for volume in spec.get("volumes", []):
            source = volume.split(":")[0]
            if source.startswith((".", "/")):
                assert not source.startswith("/"), f"{name}: a host path {source}"
                assert (COMPOSE_FILE.parent / source).exists(), f"{name}: {source}"
            else:
                assert source in declared, f"{name}: volume {source} is not declared"


# -- compose: the demo -------------------------------------------------------------


def test_the_secrets_have_no_default_and_make_compose_secrets_draws_each() -> None:
    text = COMPOSE_FILE.read_text(encoding="utf-8")
    used = {name for name in SECRETS if "${" + name + ":?" in text}
    assert used == SECRETS
    assert not re.search(r"PASSWORD:-|ADMIN_TOKEN:-", text)
    write_env = runpy.run_path(str(ROOT / "ops" / "compose" / "write_env.py"))
    assert set(write_env["DRAWN"]) == SECRETS
    for name, draw in write_env["DRAWN"].items():
        drawn = draw()
        # As they are, in ORBIT_DATABASE_URL, ORBIT_AMQP_URL and `--password-env`.
        assert re.fullmatch(r"[A-Za-z0-9_-]+", drawn), name
        assert len(drawn) >= MIN_PASSWORD_LENGTH, name


def test_the_clients_of_the_stack_use_the_admin_token_it_registers() -> None:
    token = orbit_command(command_of(services()["admin-token"]))
    assert token.params["scopes"] == ["admin"]
    variable = token.params["secret_env"]
    registered = environment_of(services()["admin-token"])[variable]
    for name in ("deploy-examples", "demo"):
        assert environment_of(services()[name])["ORBIT_TOKEN"] == registered, name
        assert "admin-token" in waits_for(name), name


def test_the_demo_deploys_the_examples_then_starts_a_valid_execution() -> None:
    deploy = orbit_command(command_of(services()["deploy-examples"]))
    assert deploy.info_name == "deploy"
    definitions = {}
    for source in deploy.params["sources"]:
        # Relative to the image's working directory, where the Dockerfile copies examples/.
        image_path = in_image(str(source))
        copied = {in_image(destination): sources for sources, destination in dockerfile().copies()}
        assert image_path in copied, f"{image_path} is not copied into the image"
        for path in sorted((ROOT / copied[image_path][0]).glob("*.yaml")):
            definition = compile_definition(path.read_text(encoding="utf-8"), path.name)
            definitions[definition.ir.name] = definition
    assert definitions

    start = orbit_command(command_of(services()["demo"]))
    assert start.info_name == "start"
    assert start.params["wait"] is True
    assert depends_on(services()["demo"])["deploy-examples"] == "service_completed_successfully"
    assert {"decider", "dispatcher", "timer", "example-worker"} <= waits_for("demo")
    definition = definitions[start.params["workflow"]]
    execution_id = start.params["execution_id"]
    assert execution_id is not None
    assert EXECUTION_ID.fullmatch(execution_id)
    payload = json.loads(start.params["input_text"])
    created = start_execution(definition.ir, definition.hash, execution_id, payload)
    assert created.input == payload


# -- the Dockerfile ------------------------------------------------------------------


def test_the_image_is_python_3_11_slim_and_satisfies_requires_python() -> None:
    base = dockerfile().all("FROM")
    assert len(base) == 1
    assert base[0].argument == "python:3.11-slim"
    for project in distributions().values():
        assert Version("3.11") in SpecifierSet(project["project"]["requires-python"])


def test_the_entrypoint_is_the_orbit_command() -> None:
    assert dockerfile().last("ENTRYPOINT").exec_form() == ["orbit"]
    assert "orbit" in distributions()["libs/orbit_sdk"]["project"]["scripts"]


def test_the_default_command_is_a_valid_orbit_command() -> None:
    result = CliRunner().invoke(app, dockerfile().last("CMD").exec_form())
    assert result.exit_code == 0, result.output
    assert "Usage" in result.output


def test_containers_do_not_run_as_root() -> None:
    user = dockerfile().last("USER").argument.split(":")[0]
    assert user not in {"root", "0"}
    keywords = [item.keyword for item in dockerfile().instructions]
    last_user = len(keywords) - 1 - keywords[::-1].index("USER")
    assert "RUN" not in keywords[last_user:], "a RUN after the last USER runs as that user"
    assert any(user in item.argument for item in dockerfile().all("RUN")), "the user is not made"


def test_copied_paths_exist_and_are_in_the_build_context() -> None:
    copies = list(dockerfile().copies())
    assert copies
    for sources, _ in copies:
        for source in sources:
            assert not source.startswith("/"), f"not in the context: {source}"
            assert ".." not in PurePosixPath(source).parts, f"not in the context: {source}"
            assert not re.match(r"https?://", source), f"a download: {source}"
            path = ROOT / source
            assert path.exists(), f"COPY {source}: no such path in the repository"
            assert not ignored(source), f"COPY {source}: .dockerignore leaves it out"
            files = [path] if path.is_file() else list(path.rglob("*"))
            for file in files:
                relative = file.relative_to(ROOT).as_posix()
                if file.is_file() and "__pycache__" not in file.parts:
                    assert not ignored(relative), f".dockerignore leaves out {relative}"


def test_the_project_is_copied_before_it_is_installed() -> None:
    copied: set[str] = set()
    installs = []
    for item in dockerfile().instructions:
        if item.keyword == "COPY":
            copied.update(item.argument.split()[:-1])
        if item.keyword == "RUN" and "pip install" in item.argument:
            installs.append((item.argument, set(copied)))
    [(lock_install, copied_then), (project_install, project_copied)] = installs
    lock = re.search(r"-r\s+(\S+)", lock_install)
    assert lock is not None, lock_install
    assert lock[1] in copied_then
    arguments = project_install.split()
    assert "--no-deps" in arguments
    for directory in distributions():
        # Each distribution is installed from its directory, copied before (with
        # its pyproject.toml and README: both inside the directory).
        assert f"./{directory}" in arguments, directory
        assert PurePosixPath(directory).parts[0] in project_copied, directory


def _locked() -> dict[str, str]:
    lock = re.search(r"-r\s+(\S+)", " ".join(item.argument for item in dockerfile().all("RUN")))
    assert lock is not None
    pins = {}
    for raw in (ROOT / lock[1]).read_text(encoding="utf-8").splitlines():
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        assert "://" not in line, f"a URL in the lock file: {line}"
        assert " @ " not in line, f"a direct reference: {line}"
        assert not line.startswith("-"), f"an option, not a pin: {line}"
        requirement = Requirement(line)
        assert requirement.url is None
        [specifier] = list(requirement.specifier)
        assert specifier.operator == "==", f"not pinned: {line}"
        pins[canonicalize_name(requirement.name)] = specifier.version
    return pins


def test_the_lock_file_is_plain_pins_without_urls() -> None:
    assert len(_locked()) > 10


def test_the_lock_file_pins_every_dependency_of_the_project() -> None:
    # `pip install --no-deps .` resolves nothing: a dependency missing from the lock
    # is missing from the image.
    pins = _locked()
    ours = {canonicalize_name(p["project"]["name"]) for p in distributions().values()}
    needed = []
    for pyproject in distributions().values():
        project = pyproject["project"]
        needed += project["dependencies"]
        for extra in project.get("optional-dependencies", {}).values():
            needed += extra
    for text in needed:
        requirement = Requirement(text)
        name = canonicalize_name(requirement.name)
        if name in ours:
            continue  # installed from its directory, not from the lock
        assert name in pins, f"{requirement.name} is not in the lock file (make lock)"
        assert requirement.specifier.contains(pins[name], prereleases=True), (
            f"{requirement.name}=={pins[name]} does not satisfy {requirement.specifier}"
        )


def test_the_image_carries_no_secrets() -> None:
    for item in dockerfile().all("ENV") + dockerfile().all("ARG"):
        assert not re.search(r"PASS|SECRET|TOKEN|KEY", item.argument, re.I), item.argument
    for key, value in dockerfile().env.items():
        assert "@" not in value, f"{key} holds credentials"


def test_dockerignore_keeps_the_venv_git_and_caches_out() -> None:
    for path in (".git", ".venv", ".mypy_cache", ".ruff_cache", ".pytest_cache", ".hypothesis"):
        assert ignored(path), path
    assert ignored("libs/orbit_model/__pycache__/ir.cpython-311.pyc")
    assert not ignored("libs/orbit_model/ir.py")
