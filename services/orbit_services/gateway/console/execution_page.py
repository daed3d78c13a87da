"""One execution's page (``/ui/executions/{id}``): header, why it waits, steps, timeline,
step graph, data, history, and the forms of its actions.

While the execution runs, htmx reloads the live part (``HX-Target: live``)
every :data:`REFRESH_SECONDS`; the part rendered once it has ended has no
trigger, so the polling stops by itself. Once it stops or ends, the refresh
also replaces the actions (out of band): no form is left to send what it
would refuse or never act on.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from fastapi import APIRouter, Request
from starlette.responses import Response

from orbit_model.children import child_execution_id
from orbit_model.errors import OrbitError
from orbit_model.ir import WorkflowIR
from orbit_model.steps import unit_call
from orbit_model.units import parse_unit
from orbit_model.views import ExecutionView
from orbit_services.gateway.api.executions import Executions, not_found
from orbit_services.gateway.console import paths
from orbit_services.gateway.console.banner import reasons
from orbit_services.gateway.console.forms import JSON_FIELD, form_fields
from orbit_services.gateway.console.graph import step_graph
from orbit_services.gateway.console.notices import controls_of, notice_of
from orbit_services.gateway.console.offload import off_loop
from orbit_services.gateway.console.render import render
from orbit_services.gateway.console.steps import human_duration, step_rows
from orbit_services.gateway.console.timeline import timeline_svg
from orbit_services.gateway.edge.auth import ExecutionsRead
from orbit_services.store.rows import ExecutionRow

REFRESH_SECONDS = 1
HISTORY_SHOWN = 500
"""The most events the page lists, the latest (of the type asked for): a page refreshed
every second cannot highlight 100,000 events each time (5 s each)."""


@dataclass(frozen=True)
class ParentLink:
    """A child's parent: the execution, and the step of it that started the child."""

    execution_id: str
    step: str
    part: str = ""
    """Which part of the step: ``, element 3`` of a ``for``, `` (finally)``."""


def parent_link(parent: str | None, history: Sequence[Mapping[str, Any]]) -> ParentLink | None:
    """Where a child's "Parent" leads. Its ``parent`` is ``EXECUTION_ID:UNIT`` of the
    parent's step, and both parts may hold a ``:``: the parent's id is the one its
    first event (``WorkflowCreated``) names. None for a top-level execution, or a
    history too damaged to tell."""
    created = history[0].get("data", {}) if history else {}
    parent_id = created.get("parent_execution_id")
    if parent is None or not isinstance(parent_id, str) or not parent.startswith(parent_id + ":"):
        return None
    unit = parse_unit(parent.removeprefix(parent_id + ":"))
    if unit.role == "element":
        return ParentLink(parent_id, unit.step, f", element {unit.index}")
    return ParentLink(parent_id, unit.step, " (finally)" if unit.role == "finally" else "")


def _child_ids(
    execution_id: str, ir: WorkflowIR, history: Sequence[Mapping[str, Any]]
) -> list[str]:
    """The ids of the children the execution started, in the order they started: one
    per dispatched attempt of each ``workflow:`` unit (each element of a ``for`` too).
    Whether a unit starts one is looked up once per step and role, not per event."""
    starts: dict[tuple[str, str], bool] = {}
    ids: dict[str, None] = {}
    for event in history:
        data = event.get("data") or {}
        if event.get("type") != "StepDispatched" or not isinstance(data.get("unit"), str):
            continue
        unit = parse_unit(data["unit"])
        if (unit.role, unit.step) not in starts:
            starts[unit.role, unit.step] = _starts_child(ir, data["unit"])
        if starts[unit.role, unit.step]:
            ids[child_execution_id(execution_id, data["unit"], int(data.get("attempt", 1)))] = None
    return list(ids)


def _starts_child(ir: WorkflowIR, unit: str) -> bool:
    try:
        step, call = unit_call(ir, unit)
    except (KeyError, StopIteration):
        return False
    return step.child is not None and call is step.call


def _drawn(
    row: ExecutionRow, ir: WorkflowIR, view: ExecutionView, history: Sequence[Mapping[str, Any]]
) -> tuple[list[str], dict[str, Any]]:
    """What the page computes from the view and the history: CPU work, run off the loop."""
    closed = view.status != "running"
    return _child_ids(row.execution_id, ir, history), {
        "reasons": [] if closed else reasons(view, ir),
        "steps": step_rows(view.steps, history),
        "timeline": timeline_svg(history, ir, None if closed else datetime.now(UTC)),
        "graph": step_graph(row.definition_hash, ir, view.steps),
        "history_types": sorted({e["type"] for e in history}),
    }


def _history_shown(history: Sequence[Mapping[str, Any]], types: list[str]) -> dict[str, Any]:
    """The latest :data:`HISTORY_SHOWN` events of ``types`` (every type if none), and how
    many there are of them."""
    kept = [event for event in history if not types or event["type"] in types]
    return {"history": kept[-HISTORY_SHOWN:], "history_count": len(kept)}


async def execution_context(
    executions: Executions, row: ExecutionRow, request: Request
) -> dict[str, Any]:
    """Everything the page shows of ``row``'s execution."""
    view = await executions.view(row.execution_id)
    definition = await executions.registry.by_hash(row.definition_hash)
    ir = definition.ir
    history = await executions.history(row.execution_id)
    closed = view.status != "running"
    child_ids, drawn = await off_loop(_drawn, row, ir, view, history)
    children = await executions.store.console.executions(child_ids)
    end = row.closed_at or datetime.now(UTC)
    shown_types = request.query_params.getlist("type")
    return drawn | {
        "view": view,
        "row": row,
        "ir": ir,
        "definition_hash": row.definition_hash,
        "closed": closed,
        "controls": controls_of(view.status, history),
        "parent": parent_link(row.parent, history),
        "duration": human_duration((end - row.created_at).total_seconds()),
        # A child of a workflow the token does not cover is not found for it, as in the API.
        "children": [child for child in children if request.state.grant.covers(child.workflow)],
        **_history_shown(history, shown_types),
        "shown_types": shown_types,
        "refresh_seconds": REFRESH_SECONDS,
        "signals": {name: form_fields(schema) for name, schema in sorted(ir.signals.items())},
        "json_field": JSON_FIELD,
        "queries": sorted(ir.queries),
    }


async def visible_row(executions: Executions, grant: Any, execution_id: str) -> ExecutionRow:
    """The execution's row, if the grant may see it (NOT_FOUND otherwise, as the API)."""
    row = await executions.store.execution(execution_id)
    if row is None or not grant.covers(row.workflow):
        raise not_found(execution_id)
    return row


def execution_router(executions: Executions) -> APIRouter:
    router = APIRouter()

    @router.get(paths.EXECUTION, include_in_schema=False)
    async def execution_page(
        execution_id: str,
        request: Request,
        grant: ExecutionsRead,
        query: str | None = None,
    ) -> Response:
        row = await visible_row(executions, grant, execution_id)
        context = await execution_context(executions, row, request)
        query_result: dict[str, Any] | None = None
        if query:
            try:
                query_result = {"name": query, **await executions.query(execution_id, query)}
            except OrbitError as error:
                query_result = {"name": query, "error": error}
        target = request.headers.get("hx-target")
        template = "_live_refresh.html" if target == "live" else "execution.html"
        return render(
            request,
            template,
            **context,
            query_result=query_result,
            notice=notice_of(request.query_params),
        )

    return router
