"""What every ``orbit`` client command shares: the ``--url`` and ``--json`` options,
running a request, and turning each failure into ``CODE: message`` and an exit code.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Annotated, Any, NoReturn, TypeVar
from urllib.parse import urlsplit

import httpx
import typer

from orbit_runtime import lifecycle
from orbit_sdk.cli_render import console
from orbit_sdk.client import OrbitClient, OrbitClientError

T = TypeVar("T")
DEFAULT_URL = "http://127.0.0.1:8080"

Url = Annotated[
    str,
    typer.Option("--url", envvar="ORBIT_URL", show_envvar=True, help="The gateway's base URL."),
]
AsJson = Annotated[bool, typer.Option("--json", help="Print the API's JSON answer.")]
ExecutionId = Annotated[str, typer.Argument(help="The execution id.", show_default=False)]


class CommandFailed(Exception):
    """An operation that failed here, not at the gateway; printed as ``CODE: message``."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(f"{code}: {message}")
        self.code = code
        self.message = message


def call(url: str, work: Callable[[OrbitClient], Awaitable[T]]) -> T:
    """Run ``work`` with a client of ``url``; print any failure as ``CODE: message``, exit 1.

    A traceback is never what a user of the command line should see, so every
    way a request can fail ends here as one line on stderr.
    """
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise typer.BadParameter(f"{url!r} is not an http:// or https:// URL", param_hint="--url")

    async def run() -> T:
        async with OrbitClient(url) as client:
            return await work(client)

    try:
        return lifecycle.run(run())
    except (OrbitClientError, CommandFailed) as error:
        fail(error.code, error.message)
    except json.JSONDecodeError:
        fail("BAD_ANSWER", f"the gateway at {url} answered with something that is not JSON")
    except TimeoutError as error:
        fail("TIMEOUT", str(error) or "the operation timed out")
    except httpx.HTTPError as error:  # not a transport error (those are UNAVAILABLE already)
        fail("UNAVAILABLE", f"request to {url} failed: {error!r}")
    except KeyboardInterrupt:
        raise typer.Exit(130) from None


def fail(code: str, message: str) -> NoReturn:
    console(stderr=True).print(f"{code}: {message}", markup=False)
    raise typer.Exit(1)


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
