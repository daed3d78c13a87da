"""Pages from templates: the Jinja2 environment, its filters, and the answers every page
shares (the CSRF cookie, the friendly error pages).

Templates autoescape everything; the only markup passed through unescaped is
what this package builds itself, escaping as it goes (the SVG drawings and the
highlighted JSON and YAML).
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from jinja2 import Environment, FileSystemLoader, select_autoescape
from markupsafe import Markup
from pygments import highlight
from pygments.formatters import HtmlFormatter
from pygments.lexers import JsonLexer, YamlLexer
from starlette.requests import Request
from starlette.responses import HTMLResponse, Response

from orbit_model.access import Grant, TokenScope
from orbit_model.causes import causes_of
from orbit_model.errors import ErrorCode, OrbitError
from orbit_services.gateway.console import paths
from orbit_services.gateway.console.palette import status_colour
from orbit_services.gateway.edge.console_session import CSRF_FIELD, csrf_token, keep_csrf

HERE = Path(__file__).parent
STATIC_VERSION = "2"
"""Bumped when a static file changes, so browsers fetch it again."""

_FORMATTER = HtmlFormatter(nowrap=True, classprefix="hl-")


def pretty_json(value: Any) -> Markup:
    """``value`` as indented, highlighted JSON (escaped by Pygments)."""
    text = json.dumps(value, indent=2, ensure_ascii=False, sort_keys=False)
    return Markup(highlight(text, JsonLexer(), _FORMATTER))


def pretty_yaml(text: str) -> Markup:
    return Markup(highlight(text, YamlLexer(), _FORMATTER))


def when(value: str | datetime | None) -> str:
    """A moment as ``2026-12-07 14:02:10 UTC``; empty for none."""
    if value is None or value == "":
        return ""
    moment = value if isinstance(value, datetime) else datetime.fromisoformat(value)
    return moment.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def _environment() -> Environment:
    environment = Environment(
        loader=FileSystemLoader(HERE / "templates"),
        autoescape=select_autoescape(default=True, default_for_string=True),
        trim_blocks=True,
        lstrip_blocks=True,
    )
    environment.filters["pretty_json"] = pretty_json
    environment.filters["pretty_yaml"] = pretty_yaml
    environment.filters["when"] = when
    environment.filters["colour"] = status_colour
    environment.filters["causes"] = causes_of
    environment.globals["static_version"] = STATIC_VERSION
    environment.globals["csrf_field"] = CSRF_FIELD
    environment.globals["paths"] = paths
    return environment


TEMPLATES = _environment()


def may(grant: Grant, scope: TokenScope, workflow: str | None = None) -> bool:
    """Whether ``grant`` holds ``scope`` (for ``workflow``): what decides if a page shows
    an action's button; the action's route checks again."""
    return grant.allows(scope) and (workflow is None or grant.covers(workflow))


def render(request: Request, template: str, status: int = 200, **context: Any) -> HTMLResponse:
    """The page ``template`` with ``context``, its CSRF token, and the signed-in grant."""
    token, new = csrf_token(request)
    grant = request.scope.get("state", {}).get("grant")
    body = TEMPLATES.get_template(template).render(
        request=request, csrf=token, grant=grant, TokenScope=TokenScope, may=may, **context
    )
    response = HTMLResponse(body, status_code=status)
    if new:
        keep_csrf(response, request, token)
    return response


def error_page(request: Request, error: OrbitError) -> Response:
    """An error as a page people can read, with the code's status."""
    title = {
        ErrorCode.NOT_FOUND: "Not found",
        ErrorCode.WORKFLOW_NOT_FOUND: "Not found",
        ErrorCode.PERMISSION_DENIED: "Not allowed",
        ErrorCode.UNAVAILABLE: "Orbit is unavailable",
    }.get(ErrorCode(error.code), "Something went wrong")
    return render(
        request,
        "error.html",
        status=error.code.http_status if isinstance(error.code, ErrorCode) else 500,
        title=title,
        error=error,
    )


def refusal(request: Request, error: OrbitError) -> Response:
    """A form's refusal, for htmx to show beside the forms (not a whole page): once the
    execution has ended, the forms go too."""
    status = error.code.http_status if isinstance(error.code, ErrorCode) else 500
    ended = error.code == ErrorCode.EXECUTION_FINISHED
    return render(
        request,
        "_action_result.html",
        status=status,
        message=error.message,
        ok=False,
        controls="closed" if ended else "open",
    )
