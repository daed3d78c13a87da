"""Driver errors of asyncpg and aio-pika, translated once, at the edge, into OrbitErrors."""

from __future__ import annotations

from urllib.parse import urlsplit, urlunsplit

from orbit_model.errors import ErrorCode, OrbitError


def redact(url: str) -> str:
    """``url`` without its password, fit for a log line or an error message."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    netloc = parts.netloc.replace(f":{parts.password}@", ":***@")
    return urlunsplit(parts._replace(netloc=netloc))


def translate_connect_error(service: str, url: str, error: BaseException) -> OrbitError:
    """The error to show when ``service`` at ``url`` cannot be reached."""
    return OrbitError(
        ErrorCode.UNAVAILABLE, f"cannot connect to {service} at {redact(url)}: {error}"
    )
