"""The ``orbit`` app: the SDK's own commands, and those of installed plugins.

A plugin (the server is one) is a distribution with an entry point in the
group :data:`PLUGIN_GROUP`, naming a function that takes the typer app and
adds its commands to it; ``orbit-server`` registers ``service``, ``dev`` and
``migrate`` that way. Users keep typing ``orbit …`` whatever is installed.
"""

from __future__ import annotations

from importlib.metadata import entry_points

import typer

from orbit_sdk.cli import executions, local, login

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
    local.register(app)
    executions.register(app)
    login.register(app)
    for plugin in entry_points(group=PLUGIN_GROUP):
        plugin.load()(app)
    return app
