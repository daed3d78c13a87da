"""What the entry point ``orbit.commands`` names: the server's commands, added to ``orbit``."""

from __future__ import annotations

import typer


def register(app: typer.Typer) -> None:
    """Add the server's commands to the ``orbit`` app."""
    from orbit_services.commands.broker import broker_app  # noqa: PLC0415
    from orbit_services.commands.server import dev, migrate, service  # noqa: PLC0415
    from orbit_services.commands.tokens import token_app  # noqa: PLC0415

    app.command()(migrate)
    app.command()(service)
    app.command()(dev)
    app.add_typer(token_app)
    app.add_typer(broker_app)
