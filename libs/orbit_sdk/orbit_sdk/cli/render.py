"""How the ``orbit`` client commands show the API's answers to people: rich tables and lines.

Every function here takes the JSON the gateway answered with (SPEC §2) and
prints it; ``--json`` bypasses all of this and prints the answer itself.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Mapping, Sequence
from typing import Any

from rich.console import Console
from rich.table import Table
from rich.text import Text

from orbit_sdk.cli.steps import waiting_for

_STYLES = {
    "completed": "green",
    "succeeded": "green",
    "running": "cyan",
    "dispatched": "cyan",
    "scheduled": "cyan",
    "retry_wait": "yellow",
    "uncertain": "yellow",
    "pending": "dim",
    "skipped": "dim",
    "failed": "red",
    "timed_out": "red",
    "cancelled": "magenta",
}
_SHORT = 60
"""Characters of a value shown in a table cell before it is cut (``--json`` has it all)."""
_WIDE = 200
"""Width when the output is not a terminal: tables of long ids are not wrapped in a pipe."""


def console(stderr: bool = False) -> Console:
    """A console on the current stdout (or stderr), made per command so tests can capture it."""
    stream = sys.stderr if stderr else sys.stdout
    width = None if stream.isatty() else _WIDE
    return Console(file=stream, width=width, highlight=False, soft_wrap=True)


def print_json(data: Any) -> None:
    """The raw answer, as the API gave it."""
    sys.stdout.write(json.dumps(data, indent=2, ensure_ascii=False) + "\n")


def status_text(status: str) -> Text:
    return Text(status, style=_STYLES.get(status, ""))


def compact(value: Any, limit: int | None = _SHORT) -> str:
    """A JSON value on one line, cut at ``limit`` characters."""
    text = json.dumps(value, ensure_ascii=False, separators=(", ", ": "))
    if limit is not None and len(text) > limit:
        return text[: limit - 1] + "…"
    return text


def _block(value: Any) -> str:
    """A JSON value on one line if it is short, indented otherwise."""
    text = compact(value, limit=None)
    if len(text) <= 80:
        return text
    # Indented under the value column of show_execution's labels.
    return json.dumps(value, indent=2, ensure_ascii=False).replace("\n", "\n" + " " * 11)


def error_line(error: Mapping[str, Any] | None) -> str:
    if not error:
        return ""
    return f"{error.get('code')}: {error.get('message')}"


def show_execution(out: Console, execution: Mapping[str, Any]) -> None:
    """``orbit get``: the execution's fields, then a table of its steps."""
    fields: list[tuple[str, Text]] = [
        ("execution", Text(str(execution.get("execution_id")))),
        ("workflow", Text(f"{execution.get('workflow')}@{execution.get('version')}")),
        ("status", status_text(str(execution.get("status")))),
    ]
    if execution.get("parent"):
        fields.append(("parent", Text(str(execution["parent"]))))
    fields += [
        ("created", Text(str(execution.get("created_at")))),
        ("closed", Text(str(execution.get("closed_at") or "-"))),
        ("input", Text(_block(execution.get("input")))),
    ]
    if execution.get("error"):
        fields.append(("error", Text(error_line(execution["error"]), style="red")))
    else:
        fields.append(("output", Text(_block(execution.get("output")))))
    for lost in execution.get("lost_messages") or ():
        what = " ".join(
            str(part) for part in (lost.get("message_type"), lost.get("detail")) if part
        )
        said = f"{what} parked by {lost.get('queue')} ({lost.get('reason')}): never acted on"
        fields.append(("lost", Text(said, style="yellow")))
    for label, value in fields:
        # Lines, not a grid: a grid pads every line to its widest, which a pipe keeps.
        line = Text(f"{label:<10} ", style="bold")
        line.append_text(value)
        out.print(line)
    out.print(steps_table(execution))


def steps_table(execution: Mapping[str, Any]) -> Table:
    """Each step: status, attempt, what it waits for, and its output or error once resolved."""
    table = Table(title="steps", title_justify="left", show_edge=False, pad_edge=False)
    table.add_column("step", no_wrap=True)
    table.add_column("status", no_wrap=True)
    table.add_column("attempt", justify="right")
    table.add_column("waits for / result")
    for step_id, view in (execution.get("steps") or {}).items():
        wait = waiting_for(view)
        table.add_row(
            Text(step_id),
            status_text(str(view.get("status"))),
            str(view.get("attempt") or ""),
            Text(wait or _result(view)),
        )
        compensation = view.get("compensation")
        if compensation:
            table.add_row(
                "  ↳ compensate",
                status_text(str(compensation.get("status"))),
                str(compensation.get("attempt") or ""),
                Text(_result(compensation)),
            )
    return table


def _result(view: Mapping[str, Any]) -> str:
    status = view.get("status")
    if view.get("error"):
        return error_line(view["error"])
    if status == "succeeded":
        return "→ " + compact(view.get("output"))
    return ""


def step_line(step_id: str, view: Mapping[str, Any], wait: str) -> Text:
    """A line of ``start --wait`` progress: a step that changed and what it waits for now."""
    status = str(view.get("status"))
    line = Text(f"  {step_id:<20} ")
    line.append(f"{status:<10}", style=_STYLES.get(status, ""))
    if view.get("attempt"):
        line.append(f"  attempt {view['attempt']}")
    detail = wait or _result(view)
    if detail:
        line.append(f"  {detail}", style="dim")
    return line


def executions_table(items: Sequence[Mapping[str, Any]]) -> Table:
    """``orbit list``: one row per execution summary."""
    table = Table(show_edge=False, pad_edge=False)
    for name in ("execution", "workflow", "version", "status", "created", "closed"):
        table.add_column(name, no_wrap=True)
    for item in items:
        table.add_row(
            Text(str(item.get("execution_id"))),
            Text(str(item.get("workflow"))),
            Text(str(item.get("version"))),
            status_text(str(item.get("status"))),
            Text(str(item.get("created_at"))),
            Text(str(item.get("closed_at") or "-")),
        )
    return table


def workers_table(workers: Sequence[Mapping[str, Any]]) -> Table:
    """``orbit workers``: one row per worker with the contracts it serves."""
    table = Table(show_edge=False, pad_edge=False)
    for name in ("worker", "online", "sessions", "inflight", "runtime", "tasks", "last seen"):
        table.add_column(name, no_wrap=name != "tasks")
    for worker in workers:
        contracts = ", ".join(
            f"{c.get('task')}@{c.get('version')}" for c in worker.get("contracts") or ()
        )
        online = bool(worker.get("online"))
        table.add_row(
            Text(str(worker.get("worker_id"))),
            Text("yes" if online else "no", style="green" if online else "dim"),
            str(worker.get("sessions")),
            str(worker.get("inflight")),
            Text(f"{worker.get('runtime')} {worker.get('sdk')}"),
            Text(contracts),
            Text(str(worker.get("last_seen"))),
        )
    return table


def ranges(numbers: Sequence[int]) -> str:
    """``0-3, 7, 9-10``: sorted numbers, runs shortened."""
    runs: list[list[int]] = []
    for number in sorted(numbers):
        if runs and number == runs[-1][1] + 1:
            runs[-1][1] = number
        else:
            runs.append([number, number])
    return ", ".join(str(a) if a == b else f"{a}-{b}" for a, b in runs) or "-"


def deciders_table(found: Mapping[str, Any]) -> Table:
    """``orbit deciders``: one row per decider heard from in the last hour."""
    table = Table(show_edge=False, pad_edge=False)
    for name in ("decider", "live", "held", "partitions", "host", "pid", "last seen"):
        table.add_column(name, no_wrap=name != "partitions")
    for decider in found.get("deciders") or ():
        live = bool(decider.get("live"))
        partitions = decider.get("partitions") or []
        table.add_row(
            Text(str(decider.get("decider_id"))),
            Text("yes" if live else "no", style="green" if live else "dim"),
            str(len(partitions)),
            Text(ranges(partitions)),
            Text(str(decider.get("host"))),
            str(decider.get("pid")),
            Text(str(decider.get("seen_at"))),
        )
    return table


def history_table(events: Sequence[Mapping[str, Any]]) -> Table:
    """``orbit history``: one row per event, its data cut short (``--json`` has it whole)."""
    table = Table(show_edge=False, pad_edge=False)
    table.add_column("seq", justify="right", no_wrap=True)
    table.add_column("recorded", no_wrap=True)
    table.add_column("event", no_wrap=True)
    table.add_column("unit", no_wrap=True)
    table.add_column("data")
    for event in events:
        # Null fields say nothing here; --json keeps them.
        data = {k: v for k, v in (event.get("data") or {}).items() if v is not None}
        unit = data.pop("unit", "")
        shown = Text(compact(data, limit=100) if data else "")
        error = event.get("error")
        if isinstance(error, Mapping):  # an event that no longer decodes: why, and as stored
            raw = str(event.get("raw") or "")
            shown = Text(f"{error.get('code')}: {str(raw)[:100]}", style="red")
        table.add_row(
            str(event.get("seq")),
            str(event.get("recorded_at")),
            Text(str(event.get("type"))),
            Text(str(unit)),
            shown,
        )
    return table
