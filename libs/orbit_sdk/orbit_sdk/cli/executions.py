"""The ``orbit`` commands that talk to a gateway: deploy, start, get, history, list, signal,
cancel, query and workers (SPEC §3).

Each command makes its requests with :class:`OrbitClient` against ``--url``
(or ``ORBIT_URL``), prints the answer for people (rich tables) or, with
``--json``, the API's JSON answer as it came. Exit codes: 0 ok, 1 the
operation failed (printed as ``CODE: message`` on stderr), 2 a usage error.
``cli.py`` registers them on its app with :func:`register`.
"""

from __future__ import annotations

from enum import StrEnum
from typing import TYPE_CHECKING, Annotated, Any, Literal

import typer

from orbit_sdk.cli.common import DEFAULT_URL, AsJson, ExecutionId, Url, call, parse_json
from orbit_sdk.cli.deploy import deploy

if TYPE_CHECKING:
    from orbit_model.views import ExecutionView
    from orbit_sdk.client import OrbitClient

# Each command imports rich (orbit_sdk.cli.render) and the client in its body:
# `orbit --help` and `orbit validate` pay for neither.


class Status(StrEnum):
    """The statuses an execution can have, for ``list --status``."""

    running = "running"
    completed = "completed"
    failed = "failed"
    cancelled = "cancelled"
    timed_out = "timed_out"


def register(app: typer.Typer) -> None:
    """Add the client commands to ``app`` (the ``orbit`` app of ``cli.py``)."""
    app.command()(deploy)
    app.command()(start)
    app.command()(get)
    app.command()(history)
    app.command("list")(list_executions)
    app.command()(signal)
    app.command()(cancel)
    app.command()(query)
    app.command()(workers)
    app.command()(deciders)


# -- executions --------------------------------------------------------------------

StartId = Annotated[
    str | None,
    typer.Option(
        "--id",
        help="The execution id: the same start again is a no-op; another version or"
        " input is refused (EXECUTION_EXISTS) unless --use-existing.",
    ),
]
UseExisting = Annotated[
    bool,
    typer.Option(
        "--use-existing",
        help="With --id: if it exists, answer with it whatever its version or input.",
    ),
]


def start(
    workflow: Annotated[
        str | None,
        typer.Argument(
            help="The workflow's name (with --batch: for the lines that name none).",
            show_default=False,
        ),
    ] = None,
    *,
    batch: Annotated[
        str | None,
        typer.Option(
            "--batch",
            callback=_workflow_or_batch,
            metavar="FILE.jsonl",
            help="Start one execution per line of FILE (JSON: {workflow, version?, input?,"
            " execution_id?, on_conflict?}; - for stdin), 1,000 to a request, with a"
            " progress bar. Exit 1 if any was refused.",
        ),
    ] = None,
    version: Annotated[
        str | None, typer.Option("--version", help="Default: the highest registered.")
    ] = None,
    input_text: Annotated[
        str | None, typer.Option("--input", help="The input: JSON text, or @FILE of JSON.")
    ] = None,
    execution_id: StartId = None,
    use_existing: UseExisting = False,
    wait: Annotated[
        bool, typer.Option("--wait", help="Show each step as it moves until the execution ends.")
    ] = False,
    timeout: Annotated[
        float | None,
        typer.Option("--timeout", min=0, help="With --wait: give up after SECONDS (exit 1)."),
    ] = None,
    url: Url = DEFAULT_URL,
    as_json: AsJson = False,
) -> None:
    """Start an execution; with --wait, follow it and exit 0 only if it completed."""
    if batch is not None:
        given = [name for name, value in (("--input", input_text), ("--id", execution_id),
                 ("--version", version), ("--wait", wait), ("--use-existing", use_existing))
                 if value]  # fmt: skip
        if given:
            raise typer.BadParameter(f"--batch takes no {given[0]}: each line says it")
        _start_batch(batch, workflow, url, as_json)
        return
    assert workflow is not None  # _workflow_or_batch saw to it
    payload = None if input_text is None else parse_json(input_text, "--input")
    _start_one(
        workflow,
        payload,
        version=version,
        execution_id=execution_id,
        wait=wait,
        timeout=timeout,
        url=url,
        as_json=as_json,
        on_conflict="use_existing" if use_existing else "fail",
    )


def _workflow_or_batch(context: typer.Context, batch: str | None) -> str | None:
    """Refuse ``orbit start`` with neither a workflow nor ``--batch``, as it is parsed.

    The workflow argument is declared first, so it is in ``context.params`` here
    unless ``--batch`` came before it on the command line (and then it is given).
    """
    if batch is None and context.params.get("workflow") is None and not context.resilient_parsing:
        raise typer.BadParameter("name the workflow to start (or give --batch FILE)")
    return batch


def _start_one(
    workflow: str,
    payload: Any,
    *,
    version: str | None,
    execution_id: str | None,
    wait: bool,
    timeout: float | None,
    url: str,
    as_json: bool,
    on_conflict: Literal["fail", "use_existing"],
) -> None:
    from orbit_sdk.cli import render  # noqa: PLC0415
    from orbit_sdk.cli.follow import follow  # noqa: PLC0415

    async def run(client: OrbitClient) -> tuple[dict[str, Any], ExecutionView | None]:
        started = await client.start(
            workflow, payload, version, execution_id, on_conflict=on_conflict
        )
        if not wait:
            return started, None
        if not as_json:
            render.console().print(_started_line(started), markup=False)
        err = render.console(stderr=True)
        return started, await follow(client, str(started["execution_id"]), err, timeout)

    started, ended = call(url, run)
    if ended is None:
        if as_json:
            render.print_json(started)
        else:
            render.console().print(_started_line(started), markup=False)
        return
    if as_json:
        render.print_view(ended)
    else:
        render.show_execution(render.console(), ended)
    raise typer.Exit(0 if ended.status == "completed" else 1)


def _start_batch(source: str, workflow: str | None, url: str, as_json: bool) -> None:
    import sys  # noqa: PLC0415

    from orbit_sdk.cli import batch, render  # noqa: PLC0415

    starts = batch.read_starts(source, workflow)

    async def run(client: OrbitClient) -> list[dict[str, Any]]:
        return await batch.start_all(client, starts, show_progress=not as_json)

    results = call(url, run)
    line, problems = batch.summary(results)
    if as_json:
        render.print_json({"results": results})
    else:
        render.console().print(line, markup=False)
        for problem in problems:
            sys.stderr.write(problem + "\n")
    if problems:
        raise typer.Exit(1)


def _started_line(started: dict[str, Any]) -> str:
    word = "started" if started.get("created") else "already started"
    return f"{word} {started.get('execution_id')}"


def get(execution_id: ExecutionId, url: Url = DEFAULT_URL, as_json: AsJson = False) -> None:
    """Show an execution: status, input, output or error, and what each step waits for."""
    from orbit_sdk.cli import render  # noqa: PLC0415

    execution = call(url, lambda client: client.get(execution_id))
    if as_json:
        render.print_view(execution)
    else:
        render.show_execution(render.console(), execution)


def history(execution_id: ExecutionId, url: Url = DEFAULT_URL, as_json: AsJson = False) -> None:
    """Show an execution's events, oldest first."""
    from orbit_sdk.cli import render  # noqa: PLC0415

    events = call(url, lambda client: client.history(execution_id))
    if as_json:
        render.print_json(events)
    else:
        render.console().print(render.history_table(events))


def list_executions(
    *,
    status: Annotated[Status | None, typer.Option("--status", help="Only this status.")] = None,
    workflow: Annotated[str | None, typer.Option("--workflow", help="Only this workflow.")] = None,
    limit: Annotated[int, typer.Option("--limit", min=1, max=1000, help="Page size.")] = 50,
    cursor: Annotated[
        str | None, typer.Option("--cursor", help="The next page, from a previous list.")
    ] = None,
    url: Url = DEFAULT_URL,
    as_json: AsJson = False,
) -> None:
    """List executions, newest first."""
    from orbit_sdk.cli import render  # noqa: PLC0415

    wanted = None if status is None else status.value
    page = call(url, lambda client: client.list(wanted, workflow, limit, cursor))
    if as_json:
        render.print_view(page)
        return
    out = render.console()
    if page.items:
        out.print(render.executions_table(page.items, out.width))
    else:
        out.print("no executions", markup=False)
    if page.next_cursor:
        out.print(f"more: --cursor {page.next_cursor}", markup=False)


def signal(
    execution_id: ExecutionId,
    name: Annotated[str, typer.Argument(help="The signal's name.", show_default=False)],
    payload_text: Annotated[
        str | None,
        typer.Argument(metavar="[JSON]", help="The payload: JSON text, or @FILE of JSON."),
    ] = None,
    *,
    request_id: Annotated[
        str | None,
        typer.Option(
            "--request-id", help="The signal's id: sent again with it, it is recorded once."
        ),
    ] = None,
    url: Url = DEFAULT_URL,
    as_json: AsJson = False,
) -> None:
    """Send a signal to an execution."""
    from orbit_sdk.cli import render  # noqa: PLC0415

    payload = None if payload_text is None else parse_json(payload_text, "JSON")
    seq = call(url, lambda client: client.signal(execution_id, name, payload, request_id))
    if as_json:
        render.print_json({"seq": seq})
    else:
        render.console().print(f"signal {name} sent to {execution_id} (seq {seq})", markup=False)


def cancel(
    execution_id: ExecutionId,
    reason: Annotated[str, typer.Option("--reason", help="Recorded with the cancellation.")] = "",
    url: Url = DEFAULT_URL,
    as_json: AsJson = False,
) -> None:
    """Cancel a running execution; its compensations and cleanup steps then run."""
    from orbit_sdk.cli import render  # noqa: PLC0415

    execution = call(url, lambda client: client.cancel(execution_id, reason))
    if as_json:
        render.print_view(execution)
    else:
        render.console().print(
            f"cancel requested for {execution_id} (status {execution.status})",
            markup=False,
        )


def query(
    execution_id: ExecutionId,
    name: Annotated[str, typer.Argument(help="The query's name.", show_default=False)],
    url: Url = DEFAULT_URL,
    as_json: AsJson = False,
) -> None:
    """Print the value of a query of an execution, as JSON."""
    from orbit_sdk.cli import render  # noqa: PLC0415

    value = call(url, lambda client: client.query(execution_id, name))
    render.print_json({"value": value} if as_json else value)


def workers(url: Url = DEFAULT_URL, as_json: AsJson = False) -> None:
    """List the workers seen in the last hour and the tasks they serve."""
    from orbit_sdk.cli import render  # noqa: PLC0415

    found = call(url, lambda client: client.workers())
    if as_json:
        render.print_json(found)
    elif found:
        render.console().print(render.workers_table(found))
    else:
        render.console().print("no workers", markup=False)


def deciders(url: Url = DEFAULT_URL, as_json: AsJson = False) -> None:
    """List the deciders and the partitions of the decider queue each holds."""
    from orbit_sdk.cli import render  # noqa: PLC0415

    found = call(url, lambda client: client.deciders())
    if as_json:
        render.print_json(found)
        return
    render.console().print(render.deciders_table(found))
    unowned = found.get("unowned") or []
    summary = (
        f"{found.get('partitions')} partitions, "
        + ("balanced" if found.get("balanced") else "not balanced")
        + (f"; not held now: {render.ranges(unowned)}" if unowned else "")
    )
    render.console().print(summary, markup=False)
