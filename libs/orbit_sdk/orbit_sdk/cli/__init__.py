"""The ``orbit`` command line (the ``cli`` extra: typer and rich).

``main`` builds the app only when called, and every command imports what it
needs inside its body, so ``orbit --help`` loads the command line alone, not
the compiler, the HTTP client or the server. The server (``orbit-server``)
adds its commands through the entry-point group ``orbit.commands``
(:mod:`orbit_sdk.cli.app`).
"""

from __future__ import annotations

import sys


def main() -> None:
    """Entry point of the ``orbit`` console script."""
    try:
        from orbit_sdk.cli.app import build_app  # noqa: PLC0415  (typer: the cli extra)
    except ImportError as error:
        if error.name not in ("typer", "rich", "click"):
            raise
        sys.stderr.write(
            "the orbit command line needs the cli extra: pip install 'orbit-sdk[cli]'\n"
        )
        raise SystemExit(2) from None
    build_app()()
