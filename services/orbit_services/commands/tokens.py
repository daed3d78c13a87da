"""``orbit token create|list|revoke``: API tokens, made on the database directly.

Like ``orbit migrate``, these need only ``ORBIT_DATABASE_URL``: the first
admin token is made before any gateway runs. ``create`` prints the secret
once, alone on stdout (so ``TOKEN=$(orbit token create …)`` works); what
else it says goes to stderr. Only the secret's digest is stored.
"""

from __future__ import annotations

import json
import os
import sys
from typing import TYPE_CHECKING, Annotated, Any

import typer

from orbit_sdk.cli.hints import orbit_command

if TYPE_CHECKING:
    from orbit_services.store.tokens import TokenStore

AsJson = Annotated[bool, typer.Option("--json", help="Print JSON.")]

token_app = typer.Typer(
    name="token",
    help="Make, list and revoke API tokens (on the database directly).",
    no_args_is_help=True,
    rich_markup_mode=None,
)


async def _with_tokens(work: Any) -> Any:
    from orbit_services.runtime.settings import load_settings  # noqa: PLC0415
    from orbit_services.store import EventStore  # noqa: PLC0415

    settings = load_settings()
    store = await EventStore.connect(settings.database_url, min_size=1, max_size=1)
    try:
        return await work(store.tokens)
    finally:
        await store.close()


def _run(work: Any) -> Any:
    from orbit_sdk.cli.common import run  # noqa: PLC0415

    return run(_with_tokens(work))


Scopes = Annotated[
    list[str],
    typer.Option(
        "--scope",
        help="definitions:write, executions:start, executions:read, executions:signal,"
        " executions:cancel, workers:read or admin (repeat, or separate with commas).",
    ),
]
Workflows = Annotated[
    list[str] | None,
    typer.Option(
        "--workflow",
        help="Only workflows matching this pattern (payments.*); repeat for more."
        " Default: every workflow.",
        show_default=False,
    ),
]
SecretEnv = Annotated[
    str | None,
    typer.Option(
        "--secret-env",
        help="Store the secret held in this environment variable (one your secrets"
        " manager made, at least 32 characters) instead of drawing one.",
        show_default=False,
    ),
]


@token_app.command("create")
def create(
    *,
    name: Annotated[str, typer.Option("--name", help="Unique; revoke and list by it.")],
    scopes: Scopes,
    workflows: Workflows = None,
    expires: Annotated[
        str | None,
        typer.Option("--expires", help="Lifetime (30d, 12h); default: until revoked."),
    ] = None,
    secret_env: SecretEnv = None,
    as_json: AsJson = False,
) -> None:
    """Make an API token and print its secret, once, on a line of its own."""
    from datetime import UTC, datetime  # noqa: PLC0415

    from orbit_model.access import expiry, parse_patterns, parse_scopes  # noqa: PLC0415
    from orbit_model.errors import OrbitError  # noqa: PLC0415
    from orbit_sdk.cli.common import fail  # noqa: PLC0415

    secret = None
    if secret_env is not None:
        secret = os.environ.get(secret_env)
        if not secret:
            raise typer.BadParameter(f"{secret_env} is not set", param_hint="--secret-env")
    try:
        granted = parse_scopes(scopes)
        patterns = parse_patterns(workflows or ())
        expires_at = expiry(expires, datetime.now(UTC))
    except OrbitError as error:
        fail(error.code, error.message)

    async def make(tokens: TokenStore) -> tuple[Any, str]:
        return await tokens.create(name, granted, patterns, expires_at, secret)

    row, made = _run(make)
    if as_json:
        print(json.dumps({**row.to_json(), "secret": made if secret is None else None}, indent=2))
    else:
        _report_created(row, made if secret is None else None, secret_env)


def _report_created(row: Any, secret: str | None, secret_env: str | None) -> None:
    """Say what was made on stderr, and print a drawn secret alone on stdout."""
    until = row.expires_at.isoformat() if row.expires_at else "until revoked"
    what = (
        f"token {row.name!r}: {', '.join(row.scopes)}"
        f"{' on ' + ', '.join(row.workflows) if row.workflows else ''}, valid {until}."
    )
    if secret is None:
        sys.stderr.write(f"{what} Its secret is the one in {secret_env}.\n")
        return
    sys.stderr.write(f"{what} Its secret is on the next line and is not shown again:\n")
    print(secret, flush=True)


@token_app.command("list")
def list_tokens(as_json: AsJson = False) -> None:
    """Every token: name, scopes, workflows, created, expires, last used; never secrets."""

    async def read(tokens: TokenStore) -> list[Any]:
        return await tokens.list()

    rows = _run(read)
    if as_json:
        print(json.dumps([row.to_json() for row in rows], indent=2))
        return
    if not rows:
        make = f"{orbit_command()} token create --name admin --scope admin"
        print(f"no tokens; make one with: {make}")
        return
    print(f"{'NAME':<20} {'SCOPES':<40} {'WORKFLOWS':<16} {'CREATED':<17} {'EXPIRES':<17} USED")
    for row in rows:
        print(
            f"{row.name:<20} {','.join(row.scopes):<40} {','.join(row.workflows) or '*':<16}"
            f" {_when(row.created_at):<17} {_expiry(row):<17} {_when(row.last_used_at)}"
        )


@token_app.command("revoke")
def revoke(
    name: Annotated[str, typer.Argument(help="The token's name.")], as_json: AsJson = False
) -> None:
    """Revoke a token: every gateway refuses it from the next request on."""

    async def drop(tokens: TokenStore) -> Any:
        return await tokens.revoke(name)

    row = _run(drop)
    if as_json:
        print(json.dumps(row.to_json(), indent=2))
    else:
        print(f"revoked {row.name} at {row.revoked_at.isoformat()}")


def _when(value: Any) -> str:
    return "never" if value is None else value.strftime("%Y-%m-%d %H:%M")


def _expiry(row: Any) -> str:
    if row.revoked_at is not None:
        return "revoked"
    return "never" if row.expires_at is None else _when(row.expires_at)
