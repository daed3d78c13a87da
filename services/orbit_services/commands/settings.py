"""The services' settings as the server's commands read them."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING

import typer

if TYPE_CHECKING:
    from orbit_services.runtime.settings import Settings


def server_settings() -> Settings:
    """The services' settings; a bad one is printed and exits 2 (every server command)."""
    from orbit_services.runtime.settings import SettingsError, load_settings  # noqa: PLC0415

    try:
        return load_settings()
    except SettingsError as error:
        sys.stderr.write(f"{error.message}\n")
        raise typer.Exit(2) from None
