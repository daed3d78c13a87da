"""How the ``orbit`` client commands show the API's answers to people: rich tables and lines.

Every function here takes what the gateway answered with (SPEC §2): an execution
as the models of :mod:`orbit_model.views` (``OrbitClient`` reads it so), the rest
as JSON; ``--json`` bypasses all of this and prints the answer itself.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from rich.console import Console
from rich.table import Table
from rich.text import Text

from orbit_model.causes import causes_of
from orbit_sdk.cli.steps import waiting_for

if TYPE_CHECKING:
    from pydantic import BaseModel

    from orbit_model.views import ExecutionSummary, ExecutionView, UnitView

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


def print_view(view: BaseModel) -> None:
    """A view (an execution, a page of them) as the API gave it."""
    from orbit_model.views import view_json  # noqa: PLC0415

    print_json(view_json(view))


def when(iso: Any) -> str:
    """An API timestamp for people: UTC to the second (``2026-05-01 12:00:00Z``); ``-``
    for none, and anything that is not a timestamp as it is."""
    if not iso:
        return "-"
    try:
        moment = datetime.fromisoformat(str(iso).replace("Z", "+00:00"))
    except ValueError:
        return str(iso)
    if moment.tzinfo is not None:
        moment = moment.astimezone(UTC)
    return moment.strftime("%Y-%m-%d %H:%M:%SZ")


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


def cause_lines(error: Any, shown_execution: Any = None) -> Text:
    """An error's cause chain, a line a level (``↳ caused by CODE in step S of E: …``),
    each line starting with a newline; empty without a cause."""
    lines = Text()
    here = shown_execution if isinstance(shown_execution, str) else None
    for cause in causes_of(error):
        where = cause.where(here)
        line = f"\n  ↳ caused by {cause.code}{' in ' + where if where else ''}: {cause.message}"
        if cause.details is not None:
            line += f" {compact(cause.details)}"
        lines.append(line, style="red")
    return lines


def show_execution(out: Console, execution: ExecutionView) -> None:
    """``orbit get``: the execution's fields, then a table of its steps."""
    fields: list[tuple[str, Text]] = [
        ("execution", Text(execution.execution_id)),
        ("workflow", Text(f"{execution.workflow}@{execution.version}")),
        ("status", status_text(execution.status)),
    ]
    if execution.parent:
        fields.append(("parent", Text(execution.parent)))
    fields += [
        ("created", Text(when(execution.created_at))),
        ("closed", Text(when(execution.closed_at))),
        ("input", Text(_block(execution.input))),
    ]
    if execution.error:
        shown = Text(error_line(execution.error), style="red")
        shown.append_text(cause_lines(execution.error, execution.execution_id))
        fields.append(("error", shown))
    else:
        fields.append(("output", Text(_block(execution.output))))
    for lost in execution.lost_messages:
        what = " ".join(part for part in (lost.message_type, lost.detail) if part)
        said = f"{what} parked by {lost.queue} ({lost.reason}): never acted on"
        fields.append(("lost", Text(said, style="yellow")))
    for label, value in fields:
        # Lines, not a grid: a grid pads every line to its widest, which a pipe keeps.
        line = Text(f"{label:<10} ", style="bold")
        line.append_text(value)
        out.print(line)
    out.print(steps_table(execution))


def steps_table(execution: ExecutionView) -> Table:
    """Each step: status, attempt, what it waits for, and its output or error once resolved."""
    table = Table(title="steps", title_justify="left", show_edge=False, pad_edge=False)
    table.add_column("step", no_wrap=True)
    table.add_column("status", no_wrap=True)
    table.add_column("attempt", justify="right")
    table.add_column("waits for / result")
    for step_id, view in execution.steps.items():
        wait = waiting_for(view)
        shown = Text(wait or _result(view))
        if not wait and view.error:
            shown.append_text(cause_lines(view.error, execution.execution_id))
        table.add_row(Text(step_id), status_text(view.status), str(view.attempt or ""), shown)
        children = view.children or ()
        if len(children) > 1 or (children and not wait):
            # Each attempt's child: where to look when a retried child step failed.
            table.add_row("  ↳ children", "", "", Text(", ".join(children)))
        compensation = view.compensation
        if compensation:
            table.add_row(
                "  ↳ compensate",
                status_text(compensation.status),
                str(compensation.attempt or ""),
                Text(_result(compensation)),
            )
    return table


def _result(view: UnitView) -> str:
    if view.error:
        return error_line(view.error)
    if view.status == "succeeded":
        return "→ " + compact(view.output)
    return ""


def step_line(step_id: str, view: UnitView, wait: str) -> Text:
    """A line of ``start --wait`` progress: a step that changed and what it waits for now."""
    line = Text(f"  {step_id:<20} ")
    line.append(f"{view.status:<10}", style=_STYLES.get(view.status, ""))
    if view.attempt:
        line.append(f"  attempt {view.attempt}")
    detail = wait or _result(view)
    if detail:
        line.append(f"  {detail}", style="dim")
    return line


_GAP = 3
"""Width between two columns of a table (``show_edge=False``): a space, a rule, a space."""
_WHEN = len("2026-05-01 12:00:00Z")


def executions_table(items: Sequence[ExecutionSummary], width: int) -> Table:
    """``orbit list``: one row per execution summary, laid out for ``width`` columns.

    Ids and statuses are never cut (they are what a reader copies and scans), and a
    timestamp is at the second. When a row does not fit on one line, ``closed`` goes
    first (``orbit get`` and ``--json`` have it), then ``created`` wraps between its
    date and time and the workflow folds; an id wider than what is left folds too.
    """
    rows = [
        (
            item.execution_id,
            f"{item.workflow}@{item.version}",
            item.status,
            when(item.created_at),
            when(item.closed_at),
        )
        for item in items
    ]
    ids, workflows, statuses = (max((len(row[n]) for row in rows), default=1) for n in range(3))
    closed = ids + workflows + statuses + 2 * _WHEN + 4 * _GAP <= width
    id_width = workflow_width = None
    if ids + workflows + statuses + _WHEN + 3 * _GAP > width:
        # Fixed widths, so that rich never shrinks the id or the status to fit.
        rest = max(width - statuses - len("2026-05-01") - 3 * _GAP, 2)
        id_width = min(ids, max(rest - min(workflows, 12), rest // 2))
        workflow_width = max(rest - id_width, 1)
    table = Table(show_edge=False, pad_edge=False)
    table.add_column("execution", overflow="fold", width=id_width)
    table.add_column("workflow", overflow="fold", width=workflow_width)
    table.add_column("status", no_wrap=True, min_width=statuses)
    table.add_column("created")
    if closed:
        table.add_column("closed", no_wrap=True)
    for execution_id, workflow, status, created, ended in rows:
        cells = [Text(execution_id), Text(workflow), status_text(status), Text(created)]
        table.add_row(*cells, *([Text(ended)] if closed else []))
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
            Text(when(worker.get("last_seen"))),
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
            Text(when(decider.get("seen_at"))),
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
            when(event.get("recorded_at")),
            Text(str(event.get("type"))),
            Text(str(unit)),
            shown,
        )
    return table
