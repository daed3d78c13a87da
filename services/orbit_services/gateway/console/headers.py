"""What every page served to a browser tells it (docs/console.md, "What the pages tell
the browser"): the console's pages under ``/ui``, and outside it ``/``, the favicon and
the API's docs pages with their files.

- **No framing**, by any page of another origin: ``X-Frame-Options: DENY`` and the
  policy's ``frame-ancestors 'none'`` (a page on a sibling subdomain is the same site,
  so ``SameSite=Strict`` alone let it frame the signed-in console and click in it).
- **A Content-Security-Policy** that lets a page load and run only the gateway's own
  files: no inline script, no ``<style>`` element, no other origin. The pages keep
  to it (htmx is told not to add its indicator styles). Style *attributes* are
  allowed: the step graph's SVG sets its minimum width in one, and an attribute can
  neither run script nor load anything the policy forbids. ``/docs`` and ``/redoc``
  set a policy of their own (:mod:`.front`); this one is the default.
- ``X-Content-Type-Options: nosniff``: a file is only ever what its type says.
- ``Referrer-Policy: same-origin``: no address of a console page (which names
  executions and workflows) leaves for another site. Not ``no-referrer``: a form's
  POST would then carry ``Origin: null``, which the CSRF check refuses.
- ``Cache-Control: no-store`` on the console's pages and answers (not its static
  files, which hold no data): nothing a person saw stays in a shared browser's cache.
"""

from __future__ import annotations

from starlette.datastructures import MutableHeaders
from starlette.types import ASGIApp, Message, Receive, Send
from starlette.types import Scope as AsgiScope

from orbit_services.gateway.console import paths
from orbit_services.gateway.edge.console_session import is_console

CONSOLE_POLICY = "; ".join(
    (
        "default-src 'none'",
        "script-src 'self'",
        "style-src 'self'",
        "style-src-attr 'unsafe-inline'",
        "img-src 'self'",
        "connect-src 'self'",
        "form-action 'self'",
        "base-uri 'none'",
        "frame-ancestors 'none'",
    )
)
_PAGES = frozenset({"/", "/favicon.ico", "/docs", "/redoc"})
_PAGE_PREFIXES = ("/docs/", "/redoc/")
_EVERY_PAGE = (
    ("x-frame-options", "DENY"),
    ("x-content-type-options", "nosniff"),
    ("referrer-policy", "same-origin"),
    ("content-security-policy", CONSOLE_POLICY),
)


def _headers_for(path: str) -> tuple[tuple[str, str], ...] | None:
    """The headers a response on ``path`` gets (where it has none of that name); None:
    it is not a page (the API's answers are JSON for programs)."""
    if is_console(path):
        if path.startswith(paths.STATIC):
            return _EVERY_PAGE
        return (*_EVERY_PAGE, ("cache-control", "no-store"))
    if path in _PAGES or path.startswith(_PAGE_PREFIXES):
        return _EVERY_PAGE
    return None


class PageHeaders:
    """ASGI middleware: the headers above on every answer to a page's path, refusals and
    redirects included (it runs outside every other)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: AsgiScope, receive: Receive, send: Send) -> None:
        extra = _headers_for(scope["path"]) if scope["type"] == "http" else None
        if extra is None:
            await self.app(scope, receive, send)
            return

        async def sending(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = MutableHeaders(scope=message)
                for name, value in extra:
                    headers.setdefault(name, value)
            await send(message)

        await self.app(scope, receive, sending)
