"""``orbit login`` and ``orbit logout``: keep (or forget) the API token of a gateway.

The token goes to the user's credentials file (:mod:`orbit_sdk.credentials`),
where every later command finds it; ``ORBIT_TOKEN`` still wins when set.
"""

from __future__ import annotations

import json
import sys
from typing import Annotated

import typer

from orbit_sdk.cli.common import AsJson, Url, call, fail
from orbit_sdk.cli.hints import orbit_command


def register(app: typer.Typer) -> None:
    """Add ``login`` and ``logout`` to ``app``."""
    app.command()(login)
    app.command()(logout)


def login(
    url: Url = "",
    token: Annotated[
        str | None,
        typer.Option(
            "--token",
            help="The token; asked for (without echo) when not given. '-' reads it from stdin.",
            show_default=False,
        ),
    ] = None,
    show: Annotated[
        bool, typer.Option("--show", help="Print the token saved for the gateway, and exit.")
    ] = False,
    as_json: AsJson = False,
) -> None:
    """Check an API token against the gateway and save it for later commands."""
    from orbit_sdk.credentials import save_token, saved_token  # noqa: PLC0415

    if show:
        saved = saved_token(url)
        if saved is None:
            hint = f"run: {orbit_command()} login --url {url}"
            fail("NOT_FOUND", f"no token is saved for {url}; {hint}")
        print(json.dumps({"url": url, "token": saved}) if as_json else saved)
        return
    if token == "-":
        token = sys.stdin.readline().strip()
    elif token is None:
        token = typer.prompt("API token", hide_input=True).strip()
    if not token:
        raise typer.BadParameter("the token is empty", param_hint="--token")
    _check(url, token)
    path = save_token(url, token)
    if as_json:
        print(json.dumps({"url": url, "saved_in": str(path)}))
    else:
        print(f"logged in to {url}; the token is kept in {path}")


def _check(url: str, token: str) -> None:
    """Refuse a token the gateway does not accept (401); any other answer means it does."""
    from orbit_sdk.client import OrbitClient, OrbitClientError  # noqa: PLC0415

    async def probe(client: OrbitClient) -> None:
        try:
            await client.list(limit=1)
        except OrbitClientError as error:
            if error.status != 403:  # a token without executions:read is still a token
                raise

    call(url, probe, token=token)


def logout(url: Url = "", as_json: AsJson = False) -> None:
    """Forget the token saved for the gateway."""
    from orbit_sdk.credentials import forget_token  # noqa: PLC0415

    forgot = forget_token(url)
    if as_json:
        print(json.dumps({"url": url, "logged_out": forgot}))
    elif forgot:
        print(f"logged out of {url}")
    else:
        print(f"no token was saved for {url}")
