"""Who uses the console, and that a form was sent from it (docs/console.md, "Sign-in").

A person signs in by pasting an API token into the login page. The token is
checked as the API checks it, then kept in a cookie that page scripts cannot
read (``HttpOnly``), that no other site's page or link sends
(``SameSite=Strict``) and that only ``/ui`` receives (``Path=/ui``); the API
under ``/v1`` never reads it, so the cookie cannot be used there by a
cross-site request. The token is looked up on every request, so revoking it
ends every session that uses it from the next page on.

Every form carries a CSRF token: the value of a second cookie (drawn at
random the first time a page is served), which the server compares with the
form's field. A page of another site can make the browser send a POST but
can neither read that cookie nor set the field to it. A POST whose
``Origin`` names another site is refused as well.
"""

from __future__ import annotations

import hmac
import secrets
from http.cookies import CookieError, SimpleCookie
from urllib.parse import urlencode, urlsplit

from starlette.requests import Request
from starlette.responses import RedirectResponse, Response
from starlette.types import Scope

CONSOLE_PREFIX = "/ui"
SESSION_COOKIE = "orbit_console"
CSRF_COOKIE = "orbit_csrf"
CSRF_FIELD = "csrf"
LOGIN_PATH = "/ui/login"
STATIC_PREFIX = "/ui/static/"

_CSRF_BYTES = 24


def is_console(path: str) -> bool:
    return path == CONSOLE_PREFIX or path.startswith(CONSOLE_PREFIX + "/")


def is_open(path: str) -> bool:
    """Console paths served to anyone: the login page and the static files."""
    return path == LOGIN_PATH or path.startswith(STATIC_PREFIX)


def cookies_of(scope: Scope) -> dict[str, str]:
    """The request's cookies; an unparsable ``Cookie`` header counts as none."""
    raw = dict(scope["headers"]).get(b"cookie")
    if raw is None:
        return {}
    jar: SimpleCookie = SimpleCookie()
    try:
        jar.load(raw.decode("latin-1"))
    except CookieError:
        return {}
    return {name: morsel.value for name, morsel in jar.items()}


def session_token(scope: Scope) -> str | None:
    """The API token the console's cookie holds, if any."""
    return cookies_of(scope).get(SESSION_COOKIE) or None


def _secure(request: Request) -> bool:
    return request.url.scheme == "https"


def _keep(response: Response, request: Request, name: str, value: str) -> None:
    """A console cookie: until the browser closes, ``/ui`` only, unreadable by scripts."""
    response.set_cookie(
        name, value, path=CONSOLE_PREFIX, httponly=True, samesite="strict", secure=_secure(request)
    )


def set_session(response: Response, request: Request, token: str) -> None:
    """Keep ``token`` in the session cookie."""
    _keep(response, request, SESSION_COOKIE, token)


def clear_session(response: Response) -> None:
    response.delete_cookie(SESSION_COOKIE, path=CONSOLE_PREFIX, httponly=True, samesite="strict")


def csrf_token(request: Request) -> tuple[str, bool]:
    """The request's CSRF token, and whether it is new (then :func:`keep_csrf` it)."""
    known = request.cookies.get(CSRF_COOKIE)
    if known and len(known) >= _CSRF_BYTES:
        return known, False
    return secrets.token_urlsafe(_CSRF_BYTES), True


def keep_csrf(response: Response, request: Request, token: str) -> None:
    _keep(response, request, CSRF_COOKIE, token)


def forged(request: Request, form: dict[str, str]) -> str | None:
    """Why a console POST is refused as not sent from the console's own page; None if
    it was: the form's CSRF field matches the cookie, and any ``Origin`` is this site."""
    origin = request.headers.get("origin")
    if origin is not None:  # "null" (a sandboxed frame, say) is another site too
        host = request.headers.get("host", "")
        if urlsplit(origin).netloc.lower() != host.lower():
            return f"the form was sent from another site ({origin})"
    expected = request.cookies.get(CSRF_COOKIE, "")
    given = form.get(CSRF_FIELD, "")
    if not expected or not hmac.compare_digest(expected.encode(), given.encode()):
        return "the form's CSRF token is missing or stale: reload the page and send it again"
    return None


def to_login(scope: Scope) -> Response:
    """Where a console page sends a visitor who is not signed in: the login page, which
    brings them back to the page they asked for once they are."""
    target = scope["path"]
    query = scope.get("query_string", b"").decode("latin-1")
    if query:
        target += "?" + query
    return RedirectResponse(f"{LOGIN_PATH}?{urlencode({'next': target})}", status_code=303)
