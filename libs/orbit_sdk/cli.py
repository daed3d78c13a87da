"""The ``orbit`` command line."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console

from orbit_model import DefinitionError, compile_definition

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


def main() -> None:
    """Entry point of the ``orbit`` console script."""
    app()
