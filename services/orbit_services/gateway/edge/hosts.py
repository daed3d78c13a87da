"""Which ``Host`` the gateway serves: a request for another name is refused (421), so a web
page whose name an attacker points at 127.0.0.1 (DNS rebinding) cannot reach it."""

from __future__ import annotations

from starlette.types import ASGIApp, Receive, Scope, Send

from orbit_model.errors import ErrorCode
from orbit_services.gateway.errors import error_response

_OPEN_PATHS = frozenset({"/healthz", "/readyz"})
"""Served whatever the ``Host``: probes reach a gateway by its address, and say nothing."""
_LOOPBACK_NAMES = ("localhost", "127.0.0.1", "[::1]")


class HostGuard:
    """Refuses a request whose ``Host`` the gateway does not serve (421), so a web page
    whose name an attacker points at 127.0.0.1 (DNS rebinding) cannot reach it.

    Args:
        app: The application behind it.
        allowed: ``ORBIT_HTTP_ALLOWED_HOSTS``: names, each with or without a port;
            ``*`` for any; empty for the loopback names and ``bind_host`` on ``port``.
        bind_host: Where the gateway listens (``ORBIT_HTTP_HOST``).
        port: Its port.
    """

    def __init__(self, app: ASGIApp, allowed: tuple[str, ...], bind_host: str, port: int) -> None:
        self.app = app
        self.any = "*" in allowed
        if allowed:
            self.exact = frozenset(allowed)
            self.names = frozenset(entry for entry in allowed if _name_of(entry) == entry)
        else:
            names = (*_LOOPBACK_NAMES, _bracketed(bind_host.lower()))
            # A Host header leaves out the scheme's default port.
            bare = names if port == 80 else ()
            self.exact = frozenset((*(f"{name}:{port}" for name in names), *bare))
            self.names = frozenset()

    def serves(self, host: str) -> bool:
        """Whether a request with this ``Host`` header is served: one listed as it is, or
        whose name is listed without a port."""
        host = host.strip().lower()
        return self.any or host in self.exact or _name_of(host) in self.names

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["path"] in _OPEN_PATHS:
            await self.app(scope, receive, send)
            return
        raw = dict(scope["headers"]).get(b"host", b"").decode("latin-1")
        if self.serves(raw):
            await self.app(scope, receive, send)
            return
        message = (
            f"this gateway does not serve the host {raw!r}; list it in ORBIT_HTTP_ALLOWED_HOSTS"
        )
        await error_response(ErrorCode.INVALID_REQUEST, message, status=421)(scope, receive, send)


def _bracketed(host: str) -> str:
    return f"[{host}]" if ":" in host and not host.startswith("[") else host


def _name_of(host: str) -> str:
    """``host`` without its port (``[::1]:8080`` is ``[::1]``)."""
    if host.startswith("["):
        return host.partition("]")[0] + "]"
    return host.partition(":")[0]
