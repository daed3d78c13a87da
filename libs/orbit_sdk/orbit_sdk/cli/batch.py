"""``orbit start --batch FILE.jsonl``: many starts from a file of JSON lines.

Each non-empty line is one start, ``{"workflow", "version"?, "input"?,
"execution_id"?, "on_conflict"?}``; a WORKFLOW argument fills in the lines that
name none.
Every line is read and checked before anything is sent, so a file with a bad
line starts nothing. The starts go in requests of up to 1,000
(:meth:`OrbitClient.start_batch`), with a progress bar on stderr; each line
that names its id can be sent again safely, since its start is idempotent.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer

if TYPE_CHECKING:
    from orbit_sdk.client import OrbitClient

_FIELDS = frozenset({"workflow", "version", "input", "execution_id", "on_conflict"})


def read_starts(source: str, workflow: str | None) -> list[dict[str, Any]]:
    """The starts of ``source`` (a path, or ``-`` for stdin); a bad line is a usage error."""
    name = "stdin" if source == "-" else source
    try:
        text = sys.stdin.read() if source == "-" else Path(source).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as error:
        reason = getattr(error, "strerror", None) or str(error)
        raise typer.BadParameter(f"cannot read {name}: {reason}", param_hint="--batch") from None
    starts = []
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            item = json.loads(line)
        except ValueError as error:
            raise _bad(name, number, f"not valid JSON: {error}") from None
        if not isinstance(item, dict):
            raise _bad(name, number, "a start is a JSON object: {workflow, input?, ...}")
        unknown = sorted(set(item) - _FIELDS)
        if unknown:
            raise _bad(name, number, f"unknown field {unknown[0]!r}; fields: {sorted(_FIELDS)}")
        if "workflow" not in item:
            if workflow is None:
                raise _bad(name, number, "no workflow: name it here or as the WORKFLOW argument")
            item["workflow"] = workflow
        starts.append(item)
    return starts


def _bad(name: str, number: int, message: str) -> typer.BadParameter:
    return typer.BadParameter(f"{name}:{number}: {message}", param_hint="--batch")


async def start_all(
    client: OrbitClient, starts: list[dict[str, Any]], show_progress: bool
) -> list[dict[str, Any]]:
    """Send the starts with a progress bar on stderr; the gateway's result for each."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TimeElapsedColumn  # noqa: PLC0415

    from orbit_sdk.cli import render  # noqa: PLC0415

    progress = Progress(
        "[progress.description]{task.description}",
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=render.console(stderr=True),
        disable=not show_progress,
        transient=False,
    )
    with progress:
        task = progress.add_task("starting", total=len(starts))
        return await client.start_batch(
            starts, on_progress=lambda done: progress.update(task, completed=done)
        )


def summary(results: list[dict[str, Any]]) -> tuple[str, list[str]]:
    """A line of counts, and one line per refused start (its line in the file)."""
    created = sum(1 for r in results if r.get("created"))
    refused = [(n, r) for n, r in enumerate(results, start=1) if r.get("error")]
    again = len(results) - created - len(refused)
    line = f"started {created}, already started {again}, refused {len(refused)}"
    problems = [
        f"start {n} ({r.get('execution_id') or 'no id'}): {r['error']['code']}:"
        f" {r['error']['message']}"
        for n, r in refused
    ]
    return line, problems
