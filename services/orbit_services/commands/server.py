"""``orbit migrate``, ``orbit service`` and ``orbit dev``: set up the database, and run the
services.

Each imports what it runs in its body, so ``orbit --help`` does not load the services.
"""

from __future__ import annotations

import json
import logging
import sys
from pathlib import Path
from typing import Annotated

import typer

from orbit_services.commands.settings import server_settings

log = logging.getLogger("orbit.cli")


def _progress(line: str) -> None:
    sys.stderr.write(line + "\n")


def _say(line: str) -> None:
    print(line, flush=True)


def migrate(
    as_json: Annotated[
        bool, typer.Option("--json", help="Print the migrations applied now as JSON.")
    ] = False,
) -> None:
    """Create the database if needed and apply every migration not yet applied."""
    from orbit_sdk.cli.common import run  # noqa: PLC0415
    from orbit_services.store.migrate import migrate as run_migrations  # noqa: PLC0415

    settings = server_settings()
    applied = run(run_migrations(settings.database_url, progress=_progress))
    if as_json:
        print(json.dumps({"applied": [m.name for m in applied]}))
    else:
        print(f"database is up to date ({len(applied)} migrations applied now)")


def service(
    names: Annotated[
        list[str],
        typer.Argument(
            help="gateway, decider, dispatcher, timer or http-adapter (one or more).",
            show_default=False,
        ),
    ],
) -> None:
    """Run Orbit services in this process until SIGTERM or Ctrl-C.

    With ORBIT_BROKER_AUTH=roles, a service whose ORBIT_AMQP_URL does not log in as its
    role's user logs in with the login `orbit broker setup --save` (or `orbit dev`)
    saved for it.
    """
    from orbit_sdk.cli.common import run  # noqa: PLC0415
    from orbit_sdk.credentials import credentials_path  # noqa: PLC0415
    from orbit_sdk.lifecycle import run_until_stopped  # noqa: PLC0415
    from orbit_sdk.logs import configure_logging  # noqa: PLC0415
    from orbit_services.commands.broker_setup import saved_service_logins  # noqa: PLC0415
    from orbit_services.runner import build  # noqa: PLC0415

    settings = server_settings()
    configure_logging("+".join(names), settings.log_level, settings.log_format)
    logins = saved_service_logins(settings, names)
    try:
        services = build(names, settings, logins)
    except KeyError as error:
        sys.stderr.write(f"{error.args[0]}\n")
        raise typer.Exit(2) from None
    for name in logins:
        log.info(
            "the %s logs in to RabbitMQ with the login saved for it in %s",
            name,
            credentials_path(),
            extra={"action": "broker.saved_login"},
        )
    run(run_until_stopped(services))


def dev(
    demo: Annotated[
        bool, typer.Option("--demo", help="Deploy the examples, run their worker and one order.")
    ] = False,
    examples: Annotated[
        Path, typer.Option(help="Where the demo finds its workflows and workers.py.")
    ] = Path("examples"),
    rotate_passwords: Annotated[
        bool,
        typer.Option(
            "--rotate-passwords",
            help="Give the RabbitMQ users new passwords (default: keep the saved ones);"
            " processes still logged in with the old ones are refused when they reconnect.",
        ),
    ] = False,
) -> None:
    """Run every service in one process (migrating the database first) until Ctrl-C.

    Refuses a taken ORBIT_HTTP_PORT before it touches anything.
    """
    from orbit_sdk.cli.common import run  # noqa: PLC0415
    from orbit_sdk.logs import configure_logging  # noqa: PLC0415
    from orbit_services.commands.dev import run_dev  # noqa: PLC0415

    settings = server_settings()
    configure_logging("dev", "WARNING" if demo else settings.log_level, settings.log_format)
    if demo and not (examples / "workers.py").is_file():
        sys.stderr.write(
            f"{examples}/workers.py not found; run from the repository or pass --examples\n"
        )
        raise typer.Exit(2)
    run(run_dev(settings, _say, examples if demo else None, rotate_passwords))
