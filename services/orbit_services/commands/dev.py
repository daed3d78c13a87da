"""``orbit dev``: every service in one process, and ``--demo``: the examples, running.

The demo deploys ``examples/`` (children first), starts the example worker in
the same process, runs one order-fulfilment execution, approves it when it
waits for approval, and prints each step as it moves, then keeps serving
until Ctrl-C so the reader can go on with the ``orbit`` commands.
"""

from __future__ import annotations

import asyncio
import errno
import importlib.util
import socket
import sys
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from types import ModuleType
from typing import Any

from orbit_model.access import TokenScope
from orbit_model.errors import ErrorCode, OrbitError
from orbit_model.views import StepView
from orbit_sdk.cli.hints import orbit_command
from orbit_sdk.client import TERMINAL, OrbitClient
from orbit_sdk.credentials import credentials_path, save_token, saved_token
from orbit_sdk.lifecycle import Service, run_until_stopped
from orbit_sdk.worker import Worker
from orbit_services.commands.broker_setup import LocalRoles, provision_local_roles
from orbit_services.gateway.edge.auth import AUTH_DISABLED_WARNING
from orbit_services.runner import START_ORDER, build
from orbit_services.runtime.senders import SHARED_WARNING
from orbit_services.runtime.settings import Settings
from orbit_services.store import EventStore
from orbit_services.store.migrate import migrate

Say = Callable[[str], None]

DEMO_INPUT: dict[str, Any] = {
    "order_id": "demo-1",
    "items": [{"sku": "tea"}, {"sku": "cups"}],
    "callback_url": "https://shop.example/hooks/orders",
}


def load_module(path: Path) -> ModuleType:
    """Import a Python file by path (the examples' workers are not an installed package)."""
    spec = importlib.util.spec_from_file_location(f"orbit_demo_{path.stem}", path)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot import {path}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


async def dev_token(settings: Settings, say: Say) -> str | None:
    """The admin token of ``orbit dev``, kept where the ``orbit`` commands find it.

    The one saved for this gateway is kept while the database still accepts it
    as admin; otherwise a new one is made (``dev``, or ``dev-<time>`` when that
    name is taken) and saved, so that ``orbit …`` and the demo work with no step
    of the user's. None when authentication is disabled.
    """
    if settings.auth == "disabled":
        say(f"warning: {AUTH_DISABLED_WARNING}")
        return None
    url = settings.gateway_url
    store = await EventStore.connect(settings.database_url, min_size=1, max_size=1)
    try:
        saved = saved_token(url)
        grant = None if saved is None else await store.tokens.grant(saved)
        if saved is not None and grant is not None and grant.allows(TokenScope.ADMIN):
            say(f"API token {grant.name!r} (admin) is saved in {credentials_path()}")
            return saved
        for name in ("dev", f"dev-{datetime.now(UTC):%Y%m%d-%H%M%S}"):
            try:
                _, secret = await store.tokens.create(name, frozenset({TokenScope.ADMIN}))
                break
            except OrbitError as error:
                if error.code != ErrorCode.TOKEN_EXISTS:
                    raise
        else:  # pragma: no cover - a second dev started within the same second
            raise OrbitError(ErrorCode.TOKEN_EXISTS, "could not name the dev token")
        # The dev tokens made before (their secret is lost, or no longer saved): revoked,
        # so that admin tokens do not pile up while nobody holds them.
        for row in await store.tokens.list():
            if row.name != name and _is_dev_token(row.name) and row.revoked_at is None:
                await store.tokens.revoke(row.name)
    finally:
        await store.close()
    path = save_token(url, secret, name)
    say(f"made the admin API token {name!r} and saved it in {path}:")
    orbit = orbit_command()
    say(f'  the orbit commands use it; curl: -H "authorization: Bearer $({orbit} login --show)"')
    return secret


async def dev_broker_roles(
    settings: Settings, say: Say, rotate: bool = False
) -> tuple[Settings, LocalRoles | None]:
    """A RabbitMQ user per role on the local broker, keeping the passwords saved for
    them (new ones with ``rotate``): the settings unchanged, and their URLs. Where that
    can't be done, the settings with ``ORBIT_BROKER_AUTH=shared`` and a loud warning
    saying why."""
    if settings.broker_auth == "shared":
        say(f"warning: {SHARED_WARNING}")
        return settings, None
    try:
        roles = await provision_local_roles(settings, rotate=rotate)
    except OrbitError as error:
        say(
            f"warning: could not make a RabbitMQ user per role ({error.message});"
            " running with ORBIT_BROKER_AUTH=shared instead"
        )
        say(f"warning: {SHARED_WARNING}")
        return settings.model_copy(update={"broker_auth": "shared"}), None
    users = f"RabbitMQ users {settings.namespace}.<role>"
    if rotate:
        say(
            f"{users} given new passwords: a process still logged in with an old one"
            " is refused when it reconnects"
        )
    else:
        say(
            f"{users} set up, keeping their passwords ({orbit_command()} dev --rotate-passwords"
            " changes them)"
        )
    say(
        f"  their logins are saved in {credentials_path()} for `{orbit_command()} service`,"
        f" `{orbit_command()} worker` and AmqpClient"
    )
    return settings, roles


def check_port_free(settings: Settings) -> None:
    """Refuse to start when the gateway's port is taken, before anything is touched.

    Most often it is another ``orbit dev`` (a second ``make demo``): without this it
    would set up the broker's users and only then fail to listen. A listening socket
    is what makes the port taken: the probe reuses addresses, as the gateway does.

    Raises:
        OrbitError: ``UNAVAILABLE``, naming ``ORBIT_HTTP_PORT``.
    """
    host, port = settings.http_host or None, settings.http_port
    try:
        addresses = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except socket.gaierror:
        return  # the gateway says why it cannot listen there
    for family, kind, protocol, _, address in addresses:
        try:
            with socket.socket(family, kind, protocol) as probe:
                probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                if family == socket.AF_INET6:
                    probe.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
                probe.bind(address)
        except OSError as error:
            if error.errno != errno.EADDRINUSE:
                continue  # not taken (no IPv6 here, say): the gateway says what else is wrong
            raise OrbitError(
                ErrorCode.UNAVAILABLE,
                f"port {port} of {settings.http_host or '*'} is taken, most likely by"
                " another `orbit dev` (make demo). Stop it, or run this one on another"
                f" port: ORBIT_HTTP_PORT={_another(port)} (e.g."
                f" `ORBIT_HTTP_PORT={_another(port)} make demo`)",
            ) from None


def _another(port: int) -> int:
    return port + 1 if port < 65535 else port - 1


def _logged_in(settings: Settings, amqp_url: str) -> Settings:
    return settings.model_copy(update={"amqp_url": amqp_url})


def _is_dev_token(name: str) -> bool:
    return name == "dev" or (name.startswith("dev-") and name[4:].replace("-", "").isdigit())


async def run_dev(
    settings: Settings, say: Say, demo_dir: Path | None = None, rotate_passwords: bool = False
) -> None:
    """Migrate, run every service until SIGTERM/Ctrl-C; with ``demo_dir``, run the demo too.

    A taken port is refused first, before the database, the tokens or the broker's
    users are touched.
    """
    check_port_free(settings)
    applied = await migrate(settings.database_url, progress=say)
    say(f"database ready ({len(applied)} migrations applied now)")
    token = await dev_token(settings, say)
    settings, roles = await dev_broker_roles(settings, say, rotate_passwords)
    # The HTTP adapter only when it is enabled: otherwise http steps fail at once anyway.
    names = [n for n in START_ORDER if n != "http-adapter" or settings.http_adapter_enabled]
    services: list[Service] = build(names, settings, None if roles is None else roles.services)
    if demo_dir is not None:
        workers = load_module(demo_dir / "workers.py")
        worker_settings = settings if roles is None else _logged_in(settings, roles.worker)
        services.append(Worker(workers.TASKS, worker_id="demo", settings=worker_settings))
    url = settings.gateway_url
    orbit = orbit_command()

    async def when_started() -> None:
        say(f"Orbit is running: gateway at {url}, namespace {settings.namespace!r}")
        say(f"  the console: {url}/ui (sign in with the token `{orbit} login --show` prints)")
        if orbit != "orbit":
            say(f"  `orbit` is not on your PATH: run {orbit}, or add {Path(orbit).parent} to PATH")
        if demo_dir is not None:
            await _demo(url, token, demo_dir, say)
        say("serving until Ctrl-C")

    await run_until_stopped(services, when_started=when_started)


async def _demo(url: str, token: str | None, demo_dir: Path, say: Say) -> None:
    async with OrbitClient(url, token=token) as client:
        for deployed in await client.deploy(demo_dir):
            state = "registered" if deployed["created"] else "already registered"
            say(f"  {deployed['name']}@{deployed['version']} {state} ({deployed['hash'][:19]}…)")
        started = await client.start("order-fulfilment", DEMO_INPUT)
        execution_id = started["execution_id"]
        say(f"started order-fulfilment as {execution_id}")
        await _follow(client, execution_id, say)
        orbit = orbit_command()
        say(f"try: {orbit} get {execution_id} · {orbit} history {execution_id} · {orbit} list")


async def _follow(client: OrbitClient, execution_id: str, say: Say, timeout: float = 60) -> None:
    """Print each step's status as it leaves pending and changes; approve when it waits."""
    seen: dict[str, str] = {}
    approved = False
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while loop.time() < deadline:
        execution = await client.get(execution_id)
        for step, view in execution.steps.items():
            if seen.get(step, "pending") != view.status:
                seen[step] = view.status
                say(f"  {step:<10} {view.status}{_detail(view)}")
        if not approved and seen.get("approval") == "scheduled":
            await client.signal(execution_id, "approval", {"approved": True})
            say("  (signal approval sent: approved)")
            approved = True
        if execution.status in TERMINAL:
            say(f"{execution_id} {execution.status}: output {execution.output}")
            return
        await asyncio.sleep(0.2)
    say(
        f"{execution_id} is still running after {timeout:g}s;"
        f" {orbit_command()} get {execution_id} shows why"
    )


def _detail(view: StepView) -> str:
    return f" ({view.error['code']})" if view.error else ""
