"""The executions list (``/ui``): filters, counts per status, cursor pages, live refresh.

The filters are a plain GET form, so the page works without JavaScript; with
it, htmx reloads the results part of the page every few seconds (the request
says ``HX-Target: results`` and gets only that part).
"""

from __future__ import annotations

from datetime import UTC, datetime

from fastapi import APIRouter, Request
from starlette.responses import RedirectResponse, Response

from orbit_model.access import Grant, TokenScope, like_pattern
from orbit_model.cursors import decode_cursor, encode_cursor
from orbit_model.errors import ErrorCode, OrbitError
from orbit_services.gateway.api.executions import STATUSES, Executions
from orbit_services.gateway.api.views import summary
from orbit_services.gateway.console import paths
from orbit_services.gateway.console.render import render
from orbit_services.gateway.edge.auth import ExecutionsRead
from orbit_services.store.console import ConsoleReads, ListFilter
from orbit_services.store.rows import ExecutionRow

PAGE_SIZE = 50
REFRESH_SECONDS = 3
_STORED_AS = {"running": ("running", "created")}
"""API statuses whose executions the table holds under more than one name."""


def _moment(text: str | None, field: str) -> datetime | None:
    """A ``datetime-local`` field's value (``2026-12-07T14:02``), read as UTC."""
    if not text:
        return None
    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        raise OrbitError(
            ErrorCode.INVALID_REQUEST, f"{field} must be a date and time, not {text!r}"
        ) from None
    return moment if moment.tzinfo else moment.replace(tzinfo=UTC)


def _counts(stored: dict[str, int]) -> dict[str, int]:
    counts = dict.fromkeys(STATUSES, 0)
    for status, count in stored.items():
        shown = "running" if status == "created" else status
        counts[shown] = counts.get(shown, 0) + count
    return counts


def _where(
    grant: Grant, workflow: str | None, since: str | None, until: str | None, query: str | None
) -> ListFilter:
    return ListFilter(
        workflow=workflow,
        since=_moment(since, "since"),
        until=_moment(until, "until"),
        id_prefix=query,
        like_any=None if grant.everything else [like_pattern(p) for p in grant.workflows],
    )


async def _page(
    console: ConsoleReads, where: ListFilter, status: str | None, cursor: str | None
) -> tuple[list[ExecutionRow], bool]:
    """The page's rows, and whether older ones follow."""
    before = None if not cursor else decode_cursor(cursor)
    rows: list[ExecutionRow] = []
    for stored in _STORED_AS.get(status or "", (status,)):
        rows += await console.page(where, stored, before, PAGE_SIZE + 1)
    rows.sort(key=lambda row: row.position, reverse=True)
    return rows[:PAGE_SIZE], len(rows) > PAGE_SIZE


def _check(grant: Grant, status: str | None, workflow: str | None) -> None:
    if status is not None and status not in STATUSES:
        raise OrbitError(
            ErrorCode.INVALID_REQUEST, f"unknown status {status!r}; one of: {', '.join(STATUSES)}"
        )
    if workflow is not None:
        grant.require(TokenScope.EXECUTIONS_READ, workflow)


def listing_router(executions: Executions) -> APIRouter:
    router = APIRouter()
    console = executions.store.console

    @router.get(paths.MOUNT, include_in_schema=False)
    async def executions_list(
        request: Request,
        *,
        grant: ExecutionsRead,
        status: str | None = None,
        workflow: str | None = None,
        since: str | None = None,
        until: str | None = None,
        q: str | None = None,
        cursor: str | None = None,
    ) -> Response:
        status, workflow, query = (
            status or None,
            (workflow or "").strip() or None,
            (q or "").strip() or None,
        )
        _check(grant, status, workflow)
        if query is not None and cursor is None:  # an exact id goes straight to it
            found = await executions.store.execution(query)
            if found is not None and grant.covers(found.workflow):
                return RedirectResponse(paths.execution(found.execution_id), 303)
        where = _where(grant, workflow, since, until, query)
        page, more = await _page(console, where, status, cursor)
        counts = _counts(await console.counts(where))
        filters = {
            "status": status,
            "workflow": workflow,
            "since": since,
            "until": until,
            "q": query,
        }
        shown = {key: value for key, value in filters.items() if value}
        partial = request.headers.get("hx-target") == "results"
        return render(
            request,
            "_executions_results.html" if partial else "executions.html",
            items=[summary(row) for row in page],
            counts=counts,
            total=sum(counts.values()),
            filters={key: value or "" for key, value in filters.items()},
            statuses=STATUSES,
            status_url=lambda value: paths.listing({**shown, "status": value}),
            next_url=paths.listing({**shown, "cursor": encode_cursor(page[-1].position)})
            if more
            else None,
            first_url=paths.listing(shown) if cursor else None,
            refresh_url=paths.listing({**shown, **({"cursor": cursor} if cursor else {})}),
            refresh_seconds=REFRESH_SECONDS,
            workflows=sorted(
                {d["name"] for d in await executions.definitions() if grant.covers(d["name"])},
                key=str.lower,
            ),
        )

    return router
