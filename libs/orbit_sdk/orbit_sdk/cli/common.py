"""What every ``orbit`` command shares: the ``--url`` and ``--json`` options, running a
coroutine, and turning each failure into ``CODE: message`` and an exit code.

A command that calls the gateway sends the API token of ``ORBIT_TOKEN``, or the
one ``orbit login`` saved for that gateway (:mod:`orbit_sdk.credentials`).

Exit codes: 0 ok, 1 the operation failed (``CODE: message`` on stderr), 2 a
usage error (a bad option, a bad setting), 130 interrupted.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Awaitable, Callable, Coroutine
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, NoReturn, TypeVar

import typer

if TYPE_CHECKING:
    from orbit_sdk.client import OrbitClient
    from orbit_sdk.settings import ClientSettings

T = TypeVar("T")
DEFAULT_URL = ""
"""No ``--url`` and no ``ORBIT_URL``: :func:`gateway_url` makes one from the gateway's settings."""


def gateway_url(url: str) -> str:
    """``url`` if one was given; else where the gateway of this environment listens.

    The gateway serves on ``ORBIT_HTTP_HOST:ORBIT_HTTP_PORT``, so the default is
    built from the same settings (a wildcard host becomes the loopback address):
    a command run with the environment of its installation reaches that
    installation's gateway, not whichever one listens on 8080. A bad setting is
    printed and exits 2.
    """
    if url:
        return url
    from orbit_sdk.settings import SettingsError, load_gateway_address  # noqa: PLC0415

    try:
        return load_gateway_address().gateway_url
    except SettingsError as error:
        sys.stderr.write(f"{error.message}\n")
        raise typer.Exit(2) from None


Url = Annotated[
    str,
    typer.Option(
        "--url",
        envvar="ORBIT_URL",
        show_envvar=True,
        callback=gateway_url,
        show_default=False,
        help=(
            "The gateway's base URL, or several, comma-separated (each request goes to the"
            " next when one cannot be reached). Default: the gateway of this environment,"
            " http://ORBIT_HTTP_HOST:ORBIT_HTTP_PORT (127.0.0.1:8080 when they are unset;"
            " a wildcard host is reached on loopback)."
        ),
    ),
]
AsJson = Annotated[bool, typer.Option("--json", help="Print the API's JSON answer.")]
ExecutionId = Annotated[str, typer.Argument(help="The execution id.", show_default=False)]


def fail(code: str, message: str) -> NoReturn:
    """Print ``CODE: message`` on stderr and exit 1."""
    sys.stderr.write(f"{code}: {message}\n")
    raise typer.Exit(1)


def run(coroutine: Coroutine[Any, Any, T]) -> T:
    """Run ``coroutine``; an :class:`~orbit_model.errors.OrbitError` is printed as
    ``CODE: message`` (exit 1), a settings error exits 2, Ctrl-C exits 130.

    A traceback is never what a user of the command line should see, so every
    way an operation can fail on purpose ends here as one line on stderr.
    """
    from orbit_model.errors import OrbitError  # noqa: PLC0415
    from orbit_sdk.lifecycle import run as run_loop  # noqa: PLC0415
    from orbit_sdk.settings import SettingsError  # noqa: PLC0415

    try:
        return run_loop(coroutine)
    except SettingsError as error:
        sys.stderr.write(f"{error.message}\n")
        raise typer.Exit(2) from None
    except OrbitError as error:
        fail(error.code, error.message)
    except KeyboardInterrupt:
        raise typer.Exit(130) from None


def client_settings(role: str | None = None) -> ClientSettings:
    """The worker's (``role="worker"``) or client's settings; a bad one is printed and
    exits 2."""
    from orbit_sdk.settings import SettingsError, load_client_settings  # noqa: PLC0415

    try:
        return load_client_settings(role)
    except SettingsError as error:
        sys.stderr.write(f"{error.message}\n")
        raise typer.Exit(2) from None


def call(url: str, work: Callable[[OrbitClient], Awaitable[T]], token: str | None = None) -> T:
    """Run ``work`` with a client of ``url`` (sending ``token``, or the one of
    :func:`~orbit_sdk.credentials.token_for`); print any failure as ``CODE: message``,
    exit 1."""
    import httpx  # noqa: PLC0415

    from orbit_model.errors import ErrorCode  # noqa: PLC0415
    from orbit_sdk.client import OrbitClient, gateway_urls  # noqa: PLC0415

    try:
        urls = gateway_urls(url)
    except ValueError as error:
        raise typer.BadParameter(str(error), param_hint="--url") from None

    from orbit_sdk.credentials import token_for  # noqa: PLC0415

    async def with_client() -> T:
        # One installation behind every gateway: the token saved for the first serves all.
        async with OrbitClient(urls, token=token or token_for(urls[0])) as client:
            return await work(client)

    try:
        return run(with_client())
    except json.JSONDecodeError:
        fail(ErrorCode.BAD_ANSWER, f"the gateway at {url} answered with something that is not JSON")
    except TimeoutError as error:
        fail(ErrorCode.TIMEOUT, str(error) or "the operation timed out")
    except httpx.HTTPError as error:  # not a transport error (those are UNAVAILABLE already)
        fail(ErrorCode.UNAVAILABLE, f"request to {url} failed: {error!r}")


def parse_json(text: str, option: str) -> Any:
    """``text`` as JSON, or the JSON in file ``PATH`` for ``@PATH``; bad JSON is a usage error."""
    source = "the value"
    if text.startswith("@"):
        path = Path(text[1:])
        source = str(path)
        try:
            text = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as error:
            reason = getattr(error, "strerror", None) or str(error)
            raise typer.BadParameter(f"cannot read {path}: {reason}", param_hint=option) from None
    try:
        return json.loads(text)
    except ValueError as error:
        message = f"{source} is not valid JSON: {error}"
        raise typer.BadParameter(message, param_hint=option) from None
