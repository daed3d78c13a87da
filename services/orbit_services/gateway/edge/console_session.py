"""Who uses the console, and that a form was sent from it (docs/console.md, "Signing in").

A person signs in by pasting an API token (or a JWT) into the login page. The
token is checked as the API checks it, and the console opens a session for it
(:class:`~orbit_services.store.console_sessions.ConsoleSessions`): the cookie
holds the session's random id, never the token. The cookie is one that page
scripts cannot read (``HttpOnly``), that no other site's page or link sends
(``SameSite=Strict``) and that only ``/ui`` receives (``Path=/ui``); the API
under ``/v1`` never reads it. The session is looked up on every request, with
its token: signing out, revoking the token and the session's expiry each end it
from the next page on.

Every form carries a CSRF token. Signed in, it is derived from the session id
(an HMAC of it), so it is good for that session only: a value a page of
another site chose, even one set as a cookie from a sibling subdomain, is not
it. Before signing in (the login form) and with authentication disabled there
is no session, and the token is the value of a second cookie, drawn at random,
which the form must repeat. A POST whose ``Origin`` names another site is
refused as well.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import secrets
from http.cookies import CookieError, SimpleCookie
from urllib.parse import urlencode, urlsplit

from starlette.requests import Request
from starlette.responses import RedirectResponse, Response
from starlette.types import Scope

from orbit_services.gateway.console import paths

SESSION_COOKIE = "orbit_console"
CSRF_COOKIE = "orbit_csrf"
CSRF_FIELD = "csrf"

_CSRF_BYTES = 24


def is_console(path: str) -> bool:
    return path == paths.MOUNT or path.startswith(paths.MOUNT + "/")


def is_open(path: str) -> bool:
    """Console paths served to anyone: the login page and the static files."""
    return path == paths.LOGIN or path.startswith(paths.STATIC)


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


def session_id(scope: Scope) -> str | None:
    """The id of the console session the request's cookie names, if any."""
    return cookies_of(scope).get(SESSION_COOKIE) or None


def _secure(request: Request) -> bool:
    return request.url.scheme == "https"


def _keep(response: Response, request: Request, name: str, value: str) -> None:
    """A console cookie: until the browser closes, ``/ui`` only, unreadable by scripts."""
    response.set_cookie(
        name, value, path=paths.MOUNT, httponly=True, samesite="strict", secure=_secure(request)
    )


def set_session(response: Response, request: Request, session: str) -> None:
    """Keep the id of the session just opened in the session cookie."""
    _keep(response, request, SESSION_COOKIE, session)


def clear_session(response: Response) -> None:
    response.delete_cookie(SESSION_COOKIE, path=paths.MOUNT, httponly=True, samesite="strict")


def csrf_token(request: Request) -> tuple[str, bool]:
    """The request's CSRF token, and whether it is new (then :func:`keep_csrf` it): its
    session's, or the CSRF cookie's where there is no session."""
    session = session_id(request.scope)
    if session is not None:
        mac = hmac.new(session.encode(), b"orbit console csrf", hashlib.sha256).digest()
        return base64.urlsafe_b64encode(mac).decode().rstrip("="), False
    known = request.cookies.get(CSRF_COOKIE)
    if known and len(known) >= _CSRF_BYTES:
        return known, False
    return secrets.token_urlsafe(_CSRF_BYTES), True


def keep_csrf(response: Response, request: Request, token: str) -> None:
    _keep(response, request, CSRF_COOKIE, token)


def forged(request: Request, form: dict[str, str]) -> str | None:
    """Why a console POST is refused as not sent from the console's own page; None if
    it was: the form's CSRF field is the request's token (:func:`csrf_token`), and any
    ``Origin`` is this site."""
    origin = request.headers.get("origin")
    if origin is not None:  # "null" (a sandboxed frame, say) is another site too
        host = request.headers.get("host", "")
        if urlsplit(origin).netloc.lower() != host.lower():
            return f"the form was sent from another site ({origin})"
    expected, new = csrf_token(request)
    given = form.get(CSRF_FIELD, "")
    if new or not hmac.compare_digest(expected.encode(), given.encode()):
        return "the form's CSRF token is missing or stale: reload the page and send it again"
    return None


def to_login(scope: Scope) -> Response:
    """Where a console page sends a visitor who is not signed in: the login page, which
    brings them back to the page they asked for once they are."""
    target = scope["path"]
    query = scope.get("query_string", b"").decode("latin-1")
    if query:
        target += "?" + query
    return RedirectResponse(f"{paths.LOGIN}?{urlencode({'next': target})}", status_code=303)
