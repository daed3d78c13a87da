"""The ``orbit`` commands that need no gateway: ``validate`` and ``worker``.

Both import what they need in their bodies: ``orbit --help`` must not pay
for the compiler, and ``orbit validate`` not for the AMQP client.
"""

from __future__ import annotations

import importlib
import json
import sys
from pathlib import Path
from typing import Annotated, Any

import typer


def register(app: typer.Typer) -> None:
    """Add ``validate`` and ``worker`` to ``app``."""
    app.command()(validate)
    app.command()(worker)


def validate(
    files: Annotated[list[Path], typer.Argument(help="Workflow YAML files.", show_default=False)],
    ir: Annotated[bool, typer.Option("--ir", help="Print each compiled IR as JSON.")] = False,
    as_json: Annotated[
        bool,
        typer.Option(
            "--json",
            help="Print a JSON list: per file its workflow, version and hash (and IR with"
            " --ir), or its problems.",
        ),
    ] = False,
) -> None:
    """Compile workflow files; print `ok NAME@VERSION HASH` or every error with its line.

    Exits 0 when every file compiles, 1 otherwise.
    """
    compiled = [_compiled(path, with_ir=ir) for path in files]
    if as_json:
        results = [result for result, _ in compiled]
        sys.stdout.write(json.dumps(results, indent=2, ensure_ascii=False) + "\n")
    for result, errors in [] if as_json else compiled:
        for line in errors:
            print(line, file=sys.stderr)
        if errors:
            continue
        if ir:
            sys.stdout.write(json.dumps(result["ir"], indent=2, ensure_ascii=False) + "\n")
        else:
            print(f"ok {result['workflow']}@{result['version']} {result['hash']}")
    raise typer.Exit(1 if any(errors for _, errors in compiled) else 0)


def _compiled(path: Path, *, with_ir: bool) -> tuple[dict[str, Any], list[str]]:
    """What compiling ``path`` gave: its name, version and hash (and IR), or its problems;
    and each problem as the line ``FILE:LINE: path: message``."""
    from orbit_model.compiler import compile_definition  # noqa: PLC0415
    from orbit_model.problems import DefinitionError  # noqa: PLC0415

    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as error:
        reason = f"cannot read: {getattr(error, 'strerror', None) or error}"
        return {"file": str(path), "problems": [{"message": reason}]}, [f"{path}: {reason}"]
    try:
        definition = compile_definition(text, str(path))
    except DefinitionError as error:
        problems = [{"line": p.line, "path": p.path, "message": p.message} for p in error.problems]
        return {"file": str(path), "problems": problems}, [str(p) for p in error.problems]
    result: dict[str, Any] = {
        "file": str(path),
        "workflow": definition.ir.name,
        "version": definition.ir.version,
        "hash": definition.hash,
    }
    if with_ir:
        result["ir"] = definition.ir.to_json_data()
    return result, []


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
