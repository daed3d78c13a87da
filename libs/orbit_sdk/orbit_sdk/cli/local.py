"""The ``orbit`` commands that need no gateway: ``validate`` and ``worker``.

Both import what they need in their bodies: ``orbit --help`` must not pay
for the compiler, and ``orbit validate`` not for the AMQP client.
"""

from __future__ import annotations

import importlib
import sys
from pathlib import Path
from typing import Annotated

import typer


def register(app: typer.Typer) -> None:
    """Add ``validate`` and ``worker`` to ``app``."""
    app.command()(validate)
    app.command()(worker)


def validate(
    files: Annotated[list[Path], typer.Argument(help="Workflow YAML files.", show_default=False)],
    ir: Annotated[bool, typer.Option("--ir", help="Print each compiled IR as JSON.")] = False,
) -> None:
    """Compile workflow files; print `ok NAME@VERSION HASH` or every error with its line.

    Exits 0 when every file compiles, 1 otherwise.
    """
    from orbit_model.compiler import compile_definition  # noqa: PLC0415
    from orbit_model.problems import DefinitionError  # noqa: PLC0415

    failed = False
    for path in files:
        try:
            text = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as error:
            reason = getattr(error, "strerror", None) or error
            print(f"{path}: cannot read: {reason}", file=sys.stderr)
            failed = True
            continue
        try:
            definition = compile_definition(text, str(path))
        except DefinitionError as error:
            for problem in error.problems:
                print(problem, file=sys.stderr)
            failed = True
            continue
        if ir:
            sys.stdout.write(definition.ir.model_dump_json(indent=2, exclude_none=True) + "\n")
        else:
            print(f"ok {definition.ref} {definition.hash}")
    raise typer.Exit(1 if failed else 0)


def worker(
    target: Annotated[
        str,
        typer.Argument(
            help="MODULE:OBJECT, a Worker or a list of tasks (examples.workers:worker).",
            show_default=False,
        ),
    ],
) -> None:
    """Run a worker until SIGTERM or Ctrl-C."""
    from orbit_sdk.cli.common import client_settings, run  # noqa: PLC0415
    from orbit_sdk.lifecycle import run_until_stopped  # noqa: PLC0415
    from orbit_sdk.logs import configure_logging  # noqa: PLC0415
    from orbit_sdk.worker import Worker  # noqa: PLC0415

    settings = client_settings("worker")
    configure_logging("worker", settings.log_level, settings.log_format)
    module_name, _, attribute = target.partition(":")
    if not module_name or not attribute:
        print(f"{target!r} is not MODULE:OBJECT", file=sys.stderr)
        raise typer.Exit(2)
    sys.path.insert(0, str(Path.cwd()))  # as `python -m` would: the current project imports
    try:
        found = getattr(importlib.import_module(module_name), attribute)
    except (ImportError, AttributeError) as error:
        print(f"cannot load {target}: {error}", file=sys.stderr)
        raise typer.Exit(2) from None
    running = found if isinstance(found, Worker) else Worker(found, settings=settings)
    run(run_until_stopped([running]))
