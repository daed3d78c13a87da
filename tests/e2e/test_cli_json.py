"""``--json`` on every ``orbit`` command but those that run until stopped, against a live Orbit.

The test walks the command tree of the ``orbit`` app (the server's commands
included): each command must take ``--json``, and each is run with it here,
in an order that gives it something to show, and must print JSON alone on
stdout. A command added later without a line below fails the walk.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import typer
from typer.testing import CliRunner

from orbit_sdk.cli.app import build_app
from tests.integration.conftest import OrbitEnv
from tests.integration.test_cli_client import stack_in_thread

app = build_app()

RUN_UNTIL_STOPPED = {("worker",), ("service",), ("dev",)}
"""Commands that print no data: they run a worker or services until stopped."""

WAITS = """
orbit: 1
workflow: json-walk
version: 1.0.0
signals: {go: {type: object}}
queries: {waiting: "${ steps.go.output == null }"}
steps:
  - id: go
    await: go
"""


def _leaves(command: Any, path: tuple[str, ...] = ()) -> Iterator[tuple[tuple[str, ...], Any]]:
    """Each command that is not a group of others, by its path (typer's own click)."""
    subcommands = getattr(command, "commands", None)
    if subcommands is None:
        yield path, command
        return
    for name, sub in subcommands.items():
        yield from _leaves(sub, (*path, name))


def _every_command() -> dict[tuple[str, ...], Any]:
    return dict(_leaves(typer.main.get_command(app)))


def test_every_command_that_prints_data_takes_json() -> None:
    lacking = [
        " ".join(path)
        for path, command in _every_command().items()
        if path not in RUN_UNTIL_STOPPED
        and not any("--json" in getattr(param, "opts", ()) for param in command.params)
    ]
    assert not lacking, f"without --json: {lacking}"


def _walk(url: str, workflow: Path) -> list[tuple[str, ...]]:
    """Each command with its arguments (``--json`` is added), in the order they run."""
    gateway = ("--url", url)
    return [
        ("validate", str(workflow)),
        ("deploy", str(workflow), *gateway),
        ("definitions", "list", *gateway),
        ("definitions", "show", "json-walk", *gateway),
        ("start", "json-walk", "--id", "walk-1", *gateway),
        ("start", "json-walk", "--id", "walk-2", *gateway),
        ("get", "walk-1", *gateway),
        ("query", "walk-1", "waiting", *gateway),
        ("signal", "walk-1", "go", "{}", *gateway),
        ("history", "walk-1", *gateway),
        ("cancel", "walk-2", *gateway),
        ("list", *gateway),
        ("workers", *gateway),
        ("deciders", *gateway),
        ("login", "--token", "any-token-will-do", *gateway),
        ("logout", *gateway),
        ("migrate",),
        ("token", "create", "--name", "walk", "--scope", "admin"),
        ("token", "list"),
        ("token", "revoke", "walk"),
        ("broker", "setup"),
        ("broker", "setup", "--print"),
        ("broker", "user", "add", "walk", "--role", "client"),
        ("broker", "user", "delete", "walk", "--role", "client"),
    ]


def test_each_command_prints_json(orbit_env: OrbitEnv, tmp_path: Path) -> None:
    workflow = tmp_path / "json-walk.yaml"
    workflow.write_text(WAITS)
    settings = orbit_env.settings
    env = {
        "ORBIT_DATABASE_URL": settings.database_url,
        "ORBIT_AMQP_URL": settings.amqp_url,
        "ORBIT_NAMESPACE": settings.namespace,
        "ORBIT_DECIDER_PARTITIONS": str(settings.decider_partitions),
    }
    runner = CliRunner()
    with stack_in_thread(settings, []) as url:
        walk = _walk(url, workflow)
        every = set(_every_command())
        walked = {next(args[:n] for n in (3, 2, 1) if args[:n] in every) for args in walk}
        assert walked == every - RUN_UNTIL_STOPPED
        for args in walk:
            result = runner.invoke(app, [*args, "--json"], env=env)
            assert result.exit_code == 0, f"{args}: {result.output}"
            answer: Any = json.loads(result.stdout)
            assert answer is not None, args
