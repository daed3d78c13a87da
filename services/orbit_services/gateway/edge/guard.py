"""What a request must be before any route reads it: a path and query that are text, and
a body of a JSON type (or YAML for a definition), no larger than the limits allow,
counted as it arrives.

A browser may send a ``text/plain``, form or multipart POST to any site without
asking first; refusing every other type (415 ``UNSUPPORTED_MEDIA_TYPE``) keeps
such cross-site requests from registering a definition or cancelling an
execution, with or without auth. The console's pages (``/ui``) take plain
forms, each with a CSRF token that a cross-site page cannot know.

A body over the limit is refused (413 ``PAYLOAD_TOO_LARGE``) from its
``Content-Length`` or, when it has none, as soon as more bytes came than
allowed: it is never read whole first (the guard reads it, and hands it on
whole, so the refusal is the same on every route). A request that passed no
token check (a route open to anyone: the console's sign-in) may send
:data:`ANONYMOUS_BODY_BYTES` at most, what a sign-in form needs. A path or query with a
NUL or a lone surrogate (``%ED%A0%80``) is refused 400 ``INVALID_REQUEST``,
where the server would hand the route U+FFFD in its place.
"""

from __future__ import annotations

from urllib.parse import unquote_to_bytes

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from orbit_model.errors import ErrorCode, OrbitError
from orbit_model.payloads import text_problem
from orbit_services.gateway.edge.console_session import is_console
from orbit_services.gateway.errors import error_response

ENVELOPE_BYTES = 64 * 1024
"""Room a body needs beyond its payload (the start request's other fields)."""
ANONYMOUS_BODY_BYTES = 16 * 1024
"""The largest body of a request without a token: the sign-in form, whose token may be a
JWT of several KiB."""
_WITH_BODY = frozenset({"POST", "PUT", "PATCH"})
_YAML_TYPES = frozenset({"application/yaml", "application/x-yaml"})
_FORM_TYPE = "application/x-www-form-urlencoded"


def media_type(content_type: str | None) -> str:
    return (content_type or "").split(";", 1)[0].strip().lower()


def accepted_type(path: str, content_type: str | None) -> bool:
    """Whether a body of ``content_type`` may be sent to ``path``: JSON (``application/json``
    or ``…+json``) anywhere, YAML to ``/v1/definitions``, and a form to the console
    (whose forms carry a CSRF token: gateway.edge.console_session)."""
    media = media_type(content_type)
    if media == "application/json" or media.endswith("+json"):
        return True
    if is_console(path):
        return media == _FORM_TYPE
    return path.rstrip("/") == "/v1/definitions" and media in _YAML_TYPES


class BodyGuard:
    """The ASGI middleware that applies the module's rules.

    Args:
        app: The application behind it.
        max_body_bytes: The largest body accepted; None: no limit.
    """

    def __init__(self, app: ASGIApp, max_body_bytes: int | None) -> None:
        self.app = app
        self.max_body_bytes = max_body_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        refusal = unreadable_target(scope)
        if refusal is None and scope["method"] not in _WITH_BODY:
            await self.app(scope, receive, send)
            return
        headers = {key.lower(): value for key, value in scope["headers"]}
        raw_type = headers.get(b"content-type")
        content_type = raw_type.decode("latin-1") if raw_type is not None else None
        length_text = headers.get(b"content-length", b"").decode("latin-1").strip()
        length = int(length_text) if length_text.isdigit() else None
        limit = self.max_body_bytes
        if "grant" not in scope.get("state", {}):  # auth.Authenticate checked no token
            limit = ANONYMOUS_BODY_BYTES
        body = None
        try:
            refusal = refusal or self._refusal(scope["path"], content_type, length, limit)
            if refusal is None:
                body = await self._read(receive, limit, typed=content_type is not None)
        except OrbitError as error:
            refusal = error
        if refusal is not None:
            await error_response(ErrorCode(refusal.code), refusal.message)(scope, receive, send)
            return
        if body is None:
            return  # the client went away before it sent the whole body
        await self.app(scope, _replaying(body, receive), send)

    def _refusal(
        self, path: str, content_type: str | None, length: int | None, limit: int | None
    ) -> OrbitError | None:
        if content_type is not None and not accepted_type(path, content_type):
            return _unsupported(path)
        if content_type is None and length:
            return _unsupported(path)
        if length is not None and limit is not None and length > limit:
            return _too_large(limit)
        return None

    async def _read(self, receive: Receive, limit: int | None, *, typed: bool) -> bytes | None:
        """The body, refused once past ``limit`` (or without a type); None: the client left."""
        chunks: list[bytes] = []
        seen = 0
        while True:
            message = await receive()
            if message["type"] != "http.request":
                return None  # http.disconnect
            chunk = message.get("body", b"")
            seen += len(chunk)
            if seen and not typed:
                raise OrbitError(ErrorCode.UNSUPPORTED_MEDIA_TYPE, "a body needs a content-type")
            if limit is not None and seen > limit:
                raise _too_large(limit)
            chunks.append(chunk)
            if not message.get("more_body", False):
                return b"".join(chunks)


def _replaying(body: bytes, receive: Receive) -> Receive:
    """``receive`` giving ``body`` whole first, then what comes next (a disconnect)."""
    given = False

    async def replay() -> Message:
        nonlocal given
        if given:
            return await receive()
        given = True
        return {"type": "http.request", "body": body, "more_body": False}

    return replay


def unreadable_target(scope: Scope) -> OrbitError | None:
    """The refusal of a request whose path or query string, percent-decoded, holds a NUL
    or is not UTF-8 text (a lone surrogate's bytes, say); None when both are text."""
    raw_path = scope.get("raw_path") or str(scope["path"]).encode("utf-8", "surrogatepass")
    for part, raw in (("path", raw_path), ("query string", scope.get("query_string", b""))):
        try:
            problem = text_problem(unquote_to_bytes(raw).decode())
        except UnicodeDecodeError:
            problem = "bytes that are not UTF-8 (a lone surrogate's, say)"
        if problem is not None:
            return OrbitError(ErrorCode.INVALID_REQUEST, f"the request's {part} holds {problem}")
    return None


def _unsupported(path: str) -> OrbitError:
    kinds = "application/json"
    if path.rstrip("/") == "/v1/definitions":
        kinds += ", application/yaml or application/x-yaml"
    return OrbitError(ErrorCode.UNSUPPORTED_MEDIA_TYPE, f"the body must be sent as {kinds}")


def _too_large(limit: int) -> OrbitError:
    if limit == ANONYMOUS_BODY_BYTES:  # below every limit a token gets
        why = "without a token, as much as a sign-in needs"
    else:
        why = "ORBIT_MAX_PAYLOAD_BYTES or ORBIT_MAX_DEFINITION_BYTES"
    return OrbitError(
        ErrorCode.PAYLOAD_TOO_LARGE, f"the request body is over {limit} bytes ({why})"
    )
