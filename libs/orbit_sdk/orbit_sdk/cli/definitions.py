"""``orbit definitions list|show``: the workflow definitions a gateway has registered.

Both read the gateway's ``GET /v1/definitions`` (every name, version, hash and
registration time) and ``GET /v1/definitions/{name}/{version}`` (one compiled
IR) through :class:`~orbit_sdk.client.OrbitClient`; ``--json`` prints those
answers as they came.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Annotated, Any

import typer

from orbit_sdk.cli.common import DEFAULT_URL, AsJson, Url, call, fail

if TYPE_CHECKING:
    from rich.table import Table

    from orbit_sdk.client import OrbitClient

definitions_app = typer.Typer(
    name="definitions",
    help="List the registered workflow definitions, or show one.",
    no_args_is_help=True,
    rich_markup_mode=None,
)


@definitions_app.command("list")
def list_definitions(
    workflow: Annotated[
        str | None, typer.Option("--workflow", help="Only this workflow's versions.")
    ] = None,
    url: Url = DEFAULT_URL,
    as_json: AsJson = False,
) -> None:
    """List the registered definitions: workflow, version, hash and when registered."""
    from orbit_sdk.cli import render  # noqa: PLC0415

    found = [
        item
        for item in call(url, lambda client: client.definitions())
        if workflow is None or item.get("name") == workflow
    ]
    if as_json:
        render.print_json(found)
    elif found:
        render.console().print(_definitions_table(found))
    else:
        render.console().print("no definitions", markup=False)


@definitions_app.command("show")
def show(
    workflow: Annotated[str, typer.Argument(help="The workflow's name.", show_default=False)],
    version: Annotated[
        str | None,
        typer.Argument(help="Its version (default: the highest registered).", show_default=False),
    ] = None,
    url: Url = DEFAULT_URL,
    as_json: AsJson = False,
) -> None:
    """Show one definition: its hash, contracts, signals, queries and steps (--json: its IR)."""
    from orbit_sdk.cli import render  # noqa: PLC0415

    async def read(client: OrbitClient) -> tuple[dict[str, Any], dict[str, Any]]:
        listed = await client.definitions()
        entry = _chosen(listed, workflow, version)
        return entry, await client.definition(workflow, str(entry["version"]))

    entry, ir = call(url, read)
    if as_json:
        render.print_json(ir)
        return
    from rich.text import Text  # noqa: PLC0415

    out = render.console()
    for label, value in _fields(entry, ir):
        line = Text(f"{label:<10} ", style="bold")
        line.append(value)
        out.print(line)
    out.print(_steps_table(ir))


def _chosen(listed: Sequence[Mapping[str, Any]], workflow: str, version: str | None) -> Any:
    """The entry of ``workflow@version`` in the list, or of its highest version."""
    from orbit_model.errors import ErrorCode  # noqa: PLC0415
    from orbit_model.names import semver_key  # noqa: PLC0415

    versions = [item for item in listed if item.get("name") == workflow]
    if version is not None:
        versions = [item for item in versions if item.get("version") == version]
    if not versions:
        which = workflow if version is None else f"{workflow}@{version}"
        fail(ErrorCode.WORKFLOW_NOT_FOUND, f"workflow {which} is not registered")
    return max(versions, key=lambda item: semver_key(str(item.get("version"))))


def _definitions_table(items: Sequence[Mapping[str, Any]]) -> Table:
    from rich.table import Table  # noqa: PLC0415
    from rich.text import Text  # noqa: PLC0415

    from orbit_sdk.cli.render import when  # noqa: PLC0415

    table = Table(show_edge=False, pad_edge=False)
    for name in ("workflow", "version", "hash", "registered"):
        table.add_column(name, no_wrap=name != "workflow", overflow="fold")
    for item in items:
        table.add_row(
            Text(str(item.get("name"))),
            Text(str(item.get("version"))),
            Text(str(item.get("hash"))[:19] + "…"),  # --json and `show` have it whole
            Text(when(item.get("registered_at"))),
        )
    return table


def _fields(entry: Mapping[str, Any], ir: Mapping[str, Any]) -> list[tuple[str, str]]:
    """The lines above the steps: what the definition is and what it declares."""
    from orbit_sdk.cli.render import compact, when  # noqa: PLC0415
    from orbit_sdk.cli.steps import span  # noqa: PLC0415

    tasks = ir.get("tasks") or {}
    fields = [
        ("workflow", f"{ir.get('name')}@{ir.get('version')}"),
        ("hash", str(entry.get("hash"))),
        ("registered", when(entry.get("registered_at"))),
    ]
    if ir.get("description"):
        fields.append(("about", str(ir["description"])))
    if ir.get("timeout_ms"):
        fields.append(("timeout", span(int(ir["timeout_ms"]))))
    fields += [
        ("input", compact(ir.get("input_schema") or {})),
        ("tasks", ", ".join(f"{n}@{c.get('version')}" for n, c in tasks.items()) or "-"),
        ("signals", ", ".join(ir.get("signals") or ()) or "-"),
        ("queries", ", ".join(ir.get("queries") or ()) or "-"),
    ]
    return fields


def _steps_table(ir: Mapping[str, Any]) -> Table:
    """Each step (the ``finally`` ones last): its kind, what it runs after, what it does."""
    from rich.table import Table  # noqa: PLC0415
    from rich.text import Text  # noqa: PLC0415

    table = Table(title="steps", title_justify="left", show_edge=False, pad_edge=False)
    table.add_column("step", no_wrap=True)
    table.add_column("kind", no_wrap=True)
    table.add_column("after")
    table.add_column("does")
    tasks = ir.get("tasks") or {}
    finally_steps = ir.get("finally_steps") or []
    for step in [*(ir.get("steps") or []), *finally_steps]:
        kind = str(step.get("kind"))
        table.add_row(
            Text(str(step.get("id"))),
            Text(kind + (" (finally)" if step in finally_steps else "")),
            Text(", ".join(step.get("after") or ()) or "-"),
            Text(_does(step, tasks)),
        )
    return table


def _does(step: Mapping[str, Any], tasks: Mapping[str, Any]) -> str:
    """What a step of the IR does, in a few words."""
    from orbit_sdk.cli.render import compact  # noqa: PLC0415
    from orbit_sdk.cli.steps import span  # noqa: PLC0415

    kind = step.get("kind")
    call_ = step.get("call") or {}
    if kind == "await":
        does = f"waits for signal {step.get('signal')}"
    elif kind == "sleep":
        does = f"sleeps {span(int(step.get('duration_ms') or 0))}"
    elif kind == "workflow":
        child = step.get("child") or {}
        does = f"runs workflow {child.get('name')}@{child.get('version')}"
    elif kind == "http":
        does = "an HTTP request"
    else:
        task = str(call_.get("task"))
        does = f"task {task}@{(tasks.get(task) or {}).get('version')}"
    if step.get("for_each") is not None:
        does += f", for each of {compact(step['for_each'], limit=40)}"
    if step.get("when") is not None:
        does += f", if {compact(step['when'], limit=40)}"
    compensation = (step.get("compensate") or {}).get("call")
    if compensation:
        does += f"; undone by {compensation.get('task')}"
    return does
