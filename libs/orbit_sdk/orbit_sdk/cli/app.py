"""The ``orbit`` app: the SDK's own commands, and those of installed plugins.

A plugin (the server is one) is a distribution with an entry point in the
group :data:`PLUGIN_GROUP`, naming a function that takes the typer app and
adds its commands to it; ``orbit-server`` registers ``service``, ``dev`` and
``migrate`` that way. Users keep typing ``orbit …`` whatever is installed.
"""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, entry_points, version
from typing import Annotated

import typer

from orbit_sdk.cli import executions, local, login
from orbit_sdk.cli.definitions import definitions_app

PLUGIN_GROUP = "orbit.commands"
"""The entry-point group of the packages that add commands to ``orbit``."""


def build_app() -> typer.Typer:
    """The ``orbit`` app with every command, plugins' included."""
    app = typer.Typer(
        name="orbit",
        help="Orbit, a durable workflow engine.",
        no_args_is_help=True,
        add_completion=False,
        pretty_exceptions_enable=False,
        # Plain help: typer's rich help pulls in rich's markdown and traceback
        # modules, a quarter of a second before the first line is printed.
        rich_markup_mode=None,
    )
    app.callback()(_main)
    local.register(app)
    executions.register(app)
    app.add_typer(definitions_app)
    login.register(app)
    for plugin in entry_points(group=PLUGIN_GROUP):
        plugin.load()(app)
    return app


DISTRIBUTIONS = ("orbit-sdk", "orbit-model", "orbit-server")
"""What ``orbit --version`` names: the SDK (the command itself) and what is installed
beside it."""


def versions() -> str:
    """``orbit 0.1.0 (orbit-sdk 0.1.0, orbit-model 0.1.0, orbit-server 0.1.0)``: the
    distributions installed here, the server's only where it is."""
    found = []
    for name in DISTRIBUTIONS:
        try:
            found.append(f"{name} {version(name)}")
        except PackageNotFoundError:
            continue
    return f"orbit {version('orbit-sdk')} ({', '.join(found)})"


def _print_version(wanted: bool) -> None:
    if wanted:
        print(versions())
        raise typer.Exit()


def _main(
    show_version: Annotated[
        bool,
        typer.Option(
            "--version",
            callback=_print_version,
            is_eager=True,
            help="Print the version of Orbit's distributions installed here, and exit.",
        ),
    ] = False,
) -> None:
    """Orbit, a durable workflow engine."""
