"""One execution's page (``/ui/executions/{id}``): header, why it waits, steps, timeline,
step graph, data, history, and the forms of its actions.

While the execution runs, htmx reloads the live part (``HX-Target: live``)
every :data:`REFRESH_SECONDS`; the part rendered once it has ended has no
trigger, so the polling stops by itself.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from fastapi import APIRouter, Request
from starlette.responses import Response

from orbit_model.children import child_execution_id
from orbit_model.errors import OrbitError
from orbit_model.ir import CallStep, WorkflowIR
from orbit_model.units import FINALLY_PREFIX, element_key
from orbit_services.gateway.auth import ExecutionsRead
from orbit_services.gateway.console.banner import reasons
from orbit_services.gateway.console.forms import JSON_FIELD, form_fields
from orbit_services.gateway.console.graph import graph_svg
from orbit_services.gateway.console.render import render
from orbit_services.gateway.console.steps import human_duration, step_rows
from orbit_services.gateway.console.timeline import timeline_svg
from orbit_services.gateway.executions import Executions, not_found
from orbit_services.store.rows import ExecutionRow

REFRESH_SECONDS = 1
NOTICES = {"signal": "Signal sent.", "cancel": "Cancellation requested."}


def _child_ids(execution_id: str, ir: WorkflowIR, steps: dict[str, Any]) -> list[str]:
    """The ids of the children the execution's ``workflow:`` steps start (or started)."""
    ids = []
    for step in (*ir.steps, *ir.finally_steps):
        if not isinstance(step, CallStep) or step.child is None:
            continue
        key = step.id if step in ir.steps else FINALLY_PREFIX + step.id
        elements = (steps.get(step.id) or {}).get("elements")
        if step.for_each is not None:
            total = sum(elements.values()) if elements else 0
            ids += [child_execution_id(execution_id, element_key(key, i)) for i in range(total)]
        else:
            ids.append(child_execution_id(execution_id, key))
    return ids


async def execution_context(
    executions: Executions, row: ExecutionRow, request: Request
) -> dict[str, Any]:
    """Everything the page shows of ``row``'s execution."""
    view = await executions.view(row.execution_id)
    definition = await executions.registry.by_hash(row.definition_hash)
    ir = definition.ir
    history = await executions.history(row.execution_id)
    closed = view["status"] != "running"
    children = await executions.store.console.executions(
        _child_ids(row.execution_id, ir, view["steps"])
    )
    end = row.closed_at or datetime.now(UTC)
    shown_types = request.query_params.getlist("type")
    return {
        "view": view,
        "row": row,
        "ir": ir,
        "definition_hash": row.definition_hash,
        "closed": closed,
        "duration": human_duration((end - row.created_at).total_seconds()),
        "reasons": [] if closed else reasons(view["waiting_for"], ir),
        "steps": step_rows(view["steps"], history),
        "timeline": timeline_svg(history, ir, None if closed else datetime.now(UTC)),
        "graph": graph_svg(ir, view["steps"]),
        "children": children,
        "history": [e for e in history if not shown_types or e["type"] in shown_types],
        "history_types": sorted({e["type"] for e in history}),
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

    @router.get("/ui/executions/{execution_id}", include_in_schema=False)
    async def execution_page(
        execution_id: str,
        request: Request,
        grant: ExecutionsRead,
        query: str | None = None,
        done: str | None = None,
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
        template = "_execution_live.html" if target == "live" else "execution.html"
        return render(
            request,
            template,
            **context,
            query_result=query_result,
            notice=NOTICES.get(done or ""),
        )

    return router
