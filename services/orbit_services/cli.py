"""The server's ``orbit`` commands: ``migrate``, ``service``, ``dev``, ``token`` and ``broker``.

``orbit-server`` adds them to the SDK's ``orbit`` command through the
entry-point group ``orbit.commands`` (``orbit_sdk.cli.app``). Each imports
what it runs in its body, so ``orbit --help`` does not load the services.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

if TYPE_CHECKING:
    from orbit_services.runtime.settings import Settings


def register(app: typer.Typer) -> None:
    """Add the server's commands to the ``orbit`` app."""
    app.command()(migrate)
    app.command()(service)
    app.command()(dev)
    from orbit_services.token_cli import token_app  # noqa: PLC0415

    app.add_typer(token_app)
    from orbit_services.broker_cli import broker_app  # noqa: PLC0415

    app.add_typer(broker_app)


def server_settings() -> Settings:
    """The services' settings; a bad one is printed and exits 2 (every server command)."""
    from orbit_services.runtime.settings import SettingsError, load_settings  # noqa: PLC0415

    try:
        return load_settings()
    except SettingsError as error:
        sys.stderr.write(f"{error.message}\n")
        raise typer.Exit(2) from None


def _progress(line: str) -> None:
    sys.stderr.write(line + "\n")


def _say(line: str) -> None:
    print(line, flush=True)


def migrate() -> None:
    """Create the database if needed and apply every migration not yet applied."""
    from orbit_sdk.cli.common import run  # noqa: PLC0415
    from orbit_services.store.migrate import migrate as run_migrations  # noqa: PLC0415

    settings = server_settings()

    async def apply() -> None:
        applied = await run_migrations(settings.database_url, progress=_progress)
        print(f"database is up to date ({len(applied)} migrations applied now)")

    run(apply())


def service(
    names: Annotated[
        list[str],
        typer.Argument(
            help="gateway, decider, dispatcher, timer or http-adapter (one or more).",
            show_default=False,
        ),
    ],
) -> None:
    """Run Orbit services in this process until SIGTERM or Ctrl-C."""
    from orbit_sdk.cli.common import run  # noqa: PLC0415
    from orbit_sdk.lifecycle import run_until_stopped  # noqa: PLC0415
    from orbit_sdk.logs import configure_logging  # noqa: PLC0415
    from orbit_services.runner import build  # noqa: PLC0415

    settings = server_settings()
    configure_logging("+".join(names), settings.log_level, settings.log_format)
    try:
        services = build(names, settings)
    except KeyError as error:
        sys.stderr.write(f"{error.args[0]}\n")
        raise typer.Exit(2) from None
    run(run_until_stopped(services))


def dev(
    demo: Annotated[
        bool, typer.Option("--demo", help="Deploy the examples, run their worker and one order.")
    ] = False,
    examples: Annotated[
        Path, typer.Option(help="Where the demo finds its workflows and workers.py.")
    ] = Path("examples"),
) -> None:
    """Run every service in one process (migrating the database first) until Ctrl-C."""
    from orbit_sdk.cli.common import run  # noqa: PLC0415
    from orbit_sdk.logs import configure_logging  # noqa: PLC0415
    from orbit_services.dev import run_dev  # noqa: PLC0415

    settings = server_settings()
    configure_logging("dev", "WARNING" if demo else settings.log_level, settings.log_format)
    if demo and not (examples / "workers.py").is_file():
        sys.stderr.write(
            f"{examples}/workers.py not found; run from the repository or pass --examples\n"
        )
        raise typer.Exit(2)
    run(run_dev(settings, _say, examples if demo else None))
