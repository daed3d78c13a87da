"""The ``orbit`` command line."""

from __future__ import annotations

import importlib
import sys
from collections.abc import Coroutine
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console

from orbit_model import DefinitionError, compile_definition
from orbit_model.errors import OrbitError
from orbit_runtime import lifecycle
from orbit_runtime.lifecycle import run_until_stopped
from orbit_runtime.logs import configure_logging
from orbit_runtime.migrate import migrate as run_migrations
from orbit_runtime.settings import Settings, SettingsError, load_settings
from orbit_sdk.dev import run_dev
from orbit_sdk.worker import Worker
from orbit_services.runner import build

app = typer.Typer(
    name="orbit",
    help="Orbit, a durable workflow engine.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
_out = Console(highlight=False, soft_wrap=True)
_err = Console(stderr=True, highlight=False, soft_wrap=True)


@app.callback()
def _root() -> None:
    """Orbit, a durable workflow engine."""


@app.command()
def validate(
    files: Annotated[list[Path], typer.Argument(help="Workflow YAML files.", show_default=False)],
    ir: Annotated[bool, typer.Option("--ir", help="Print each compiled IR as JSON.")] = False,
) -> None:
    """Compile workflow files; print `ok NAME@VERSION HASH` or every error with its line.

    Exits 0 when every file compiles, 1 otherwise.
    """
    failed = False
    for path in files:
        try:
            text = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as error:
            _err.print(
                f"{path}: cannot read: {getattr(error, 'strerror', None) or error}", markup=False
            )
            failed = True
            continue
        try:
            definition = compile_definition(text, str(path))
        except DefinitionError as error:
            for problem in error.problems:
                _err.print(str(problem), markup=False)
            failed = True
            continue
        if ir:
            sys.stdout.write(definition.ir.model_dump_json(indent=2, exclude_none=True) + "\n")
        else:
            _out.print(f"ok {definition.ref} {definition.hash}", markup=False)
    raise typer.Exit(1 if failed else 0)


def _settings() -> Settings:
    try:
        return load_settings()
    except SettingsError as error:
        _err.print(str(error), markup=False)
        raise typer.Exit(2) from None


def _run(coroutine: Coroutine[Any, Any, None]) -> None:
    """Run ``coroutine``; an OrbitError is printed as ``CODE: message``, exit 1."""
    try:
        lifecycle.run(coroutine)
    except OrbitError as error:
        _err.print(f"{error.code.value}: {error.message}", markup=False)
        raise typer.Exit(1) from None
    except KeyboardInterrupt:
        raise typer.Exit(130) from None


@app.command()
def migrate() -> None:
    """Create the database if needed and apply every migration not yet applied."""
    settings = _settings()

    async def apply() -> None:
        applied = await run_migrations(settings.database_url, progress=_progress)
        _out.print(f"database is up to date ({len(applied)} migrations applied now)")

    _run(apply())


@app.command()
def service(
    names: Annotated[
        list[str],
        typer.Argument(
            help="gateway, decider, dispatcher, timer or http-adapter (one or more).",
            show_default=False,
        ),
    ],
) -> None:
    """Run Orbit services in this process until SIGTERM or Ctrl-C."""
    settings = _settings()
    configure_logging("+".join(names), settings.log_level, settings.log_format)
    try:
        services = build(names, settings)
    except KeyError as error:
        _err.print(error.args[0], markup=False)
        raise typer.Exit(2) from None
    _run(run_until_stopped(services))


@app.command()
def dev(
    demo: Annotated[
        bool, typer.Option("--demo", help="Deploy the examples, run their worker and one order.")
    ] = False,
    examples: Annotated[
        Path, typer.Option(help="Where the demo finds its workflows and workers.py.")
    ] = Path("examples"),
) -> None:
    """Run every service in one process (migrating the database first) until Ctrl-C."""
    settings = _settings()
    configure_logging("dev", "WARNING" if demo else settings.log_level, settings.log_format)
    if demo and not (examples / "workers.py").is_file():
        _err.print(f"{examples}/workers.py not found; run from the repository or pass --examples")
        raise typer.Exit(2)
    _run(run_dev(settings, _say, examples if demo else None))


@app.command()
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
    settings = _settings()
    configure_logging("worker", settings.log_level, settings.log_format)
    module_name, _, attribute = target.partition(":")
    if not module_name or not attribute:
        _err.print(f"{target!r} is not MODULE:OBJECT", markup=False)
        raise typer.Exit(2)
    sys.path.insert(0, str(Path.cwd()))  # as `python -m` would: the current project imports
    try:
        found = getattr(importlib.import_module(module_name), attribute)
    except (ImportError, AttributeError) as error:
        _err.print(f"cannot load {target}: {error}", markup=False)
        raise typer.Exit(2) from None
    running = found if isinstance(found, Worker) else Worker(found, settings=settings)
    _run(run_until_stopped([running]))


def _say(line: str) -> None:
    _out.print(line, markup=False)


def _progress(line: str) -> None:
    _err.print(line, markup=False)


def main() -> None:
    """Entry point of the ``orbit`` console script."""
    app()


# The client commands live in their own module; registered here, after the app exists,
# because they only need the app (cli_client does not import this module).
from orbit_sdk import cli_client  # noqa: E402

cli_client.register(app)
