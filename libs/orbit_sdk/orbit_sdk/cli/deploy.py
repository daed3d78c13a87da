"""``orbit deploy``: compile workflow files here, then register them, children first."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from orbit_model.errors import ErrorCode
from orbit_sdk.cli.common import DEFAULT_URL, AsJson, Url, call, fail

if TYPE_CHECKING:
    from orbit_model.compiler import Definition
    from orbit_sdk.client import OrbitClient

_YAML_SUFFIXES = (".yaml", ".yml")


def deploy(
    sources: Annotated[
        list[Path],
        typer.Argument(help="Workflow YAML files, or directories of them.", show_default=False),
    ],
    url: Url = DEFAULT_URL,
    as_json: AsJson = False,
) -> None:
    """Compile and register workflow definitions, children before the workflows that start them.

    Prints `registered NAME@VERSION HASH` (or `unchanged`) for each. Nothing is
    sent when a file does not compile: its errors are printed with their lines.
    """
    # Rich and the client when deploying, not for `orbit --help`.
    from orbit_sdk.cli import render  # noqa: PLC0415
    from orbit_sdk.sources import children_first  # noqa: PLC0415

    compiled = _compiled(_yaml_files(sources))
    out = render.console()

    async def send(client: OrbitClient) -> list[dict[str, Any]]:
        ordered = children_first(compiled)  # INVALID_DEFINITION for a cycle of children
        answers = []
        for text, _ in ordered:
            # One at a time, so the definitions registered before a refusal are shown.
            [answer] = await client.deploy(text if "\n" in text else text + "\n")
            answers.append(answer)
            if not as_json:
                word = "registered" if answer.get("created") else "unchanged"
                out.print(
                    f"{word} {answer.get('name')}@{answer.get('version')} {answer.get('hash')}",
                    markup=False,
                )
        return answers

    answers = call(url, send)
    if as_json:
        render.print_json(answers)


def _compiled(paths: list[Path]) -> list[tuple[str, Definition]]:
    """Each file's text and definition; every problem printed, and exit 1, if one fails."""
    from orbit_model.compiler import compile_definition  # noqa: PLC0415
    from orbit_model.problems import DefinitionError  # noqa: PLC0415
    from orbit_sdk.cli import render  # noqa: PLC0415

    err = render.console(stderr=True)
    compiled = []
    failed = False
    for path in paths:
        try:
            text = path.read_text(encoding="utf-8")
            compiled.append((text, compile_definition(text, str(path))))
        except (OSError, UnicodeDecodeError) as error:
            reason = getattr(error, "strerror", None) or error
            err.print(f"{path}: cannot read: {reason}", markup=False)
            failed = True
        except DefinitionError as error:
            for problem in error.problems:
                err.print(str(problem), markup=False)
            failed = True
    if failed:
        raise typer.Exit(1)
    if not compiled:
        fail(ErrorCode.INVALID_REQUEST, "no workflow files (*.yaml, *.yml) found")
    return compiled


def _yaml_files(sources: list[Path]) -> list[Path]:
    """The files named, with each directory replaced by its ``*.yaml`` files (sorted)."""
    files: list[Path] = []
    for source in sources:
        if source.is_dir():
            files.extend(sorted(p for p in source.iterdir() if p.suffix in _YAML_SUFFIXES))
        else:
            files.append(source)
    return files
