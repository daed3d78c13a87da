"""The HTTP adapter's work: one ``http:`` step's request, made safely with aiohttp.

:meth:`HttpAdapter.request` takes the input the compiler builds for the
built-in task ``orbit.http.request`` (``{method, url, headers, body,
timeout_ms}``) and answers ``{status, headers, body}`` or raises
:class:`~orbit_services.http_adapter.guard.HttpStepError` with a code for retry
policies:

- every URL, the first and each redirect's, passes
  :class:`~orbit_services.http_adapter.guard.HttpGuard`; a name is resolved here and
  every address it resolves to is checked, and aiohttp connects only to
  those addresses (:class:`CheckedResolver`), so a name cannot resolve to a
  public address for the check and to a private one for the connection;
- redirects are followed by hand, at most ``max_redirects``: 303 (and 301 or
  302 after a POST) continue with a GET without a body, 307 and 308 repeat
  the method and body; credentials are not sent to another origin;
- the whole exchange, redirects and body included, is bounded by the step's
  ``timeout`` (``ClientTimeout(total=…)`` and an asyncio deadline), and the
  body is streamed and counted against ``max_response_bytes``;
- a 2xx answer is the output, its body parsed as JSON when the content type
  says JSON, else text; any other status is ``HTTP_<status>``, retryable for
  5xx and 429.

No proxy from the environment is used and no cookie is kept between requests.
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
import socket
from dataclasses import dataclass
from typing import Any

import aiohttp
from aiohttp.abc import AbstractResolver, ResolveResult
from multidict import CIMultiDict
from pydantic import BaseModel, ConfigDict, Field, JsonValue
from yarl import URL

from orbit_model.errors import ErrorCode
from orbit_model.names import HTTP_METHODS
from orbit_model.outcome_codes import OutcomeCode
from orbit_model.payloads import payload_problem
from orbit_services.http_adapter.guard import (
    HTTP_INVALID_URL,
    DestinationForbidden,
    HttpGuard,
    HttpStepError,
    safe_url,
)
from orbit_services.runtime.settings import Settings

log = logging.getLogger("orbit.http")

HTTP_TIMEOUT = OutcomeCode.HTTP_TIMEOUT
HTTP_CONNECTION_ERROR = OutcomeCode.HTTP_CONNECTION_ERROR
HTTP_TLS_ERROR = OutcomeCode.HTTP_TLS_ERROR
HTTP_RESPONSE_TOO_LARGE = OutcomeCode.HTTP_RESPONSE_TOO_LARGE
HTTP_TOO_MANY_REDIRECTS = OutcomeCode.HTTP_TOO_MANY_REDIRECTS
HTTP_INVALID_REQUEST = ErrorCode.INVALID_INPUT

USER_AGENT = "orbit-http-adapter/1"
EXCERPT_CHARS = 500
"""How much of an error response's body its failure carries."""

_REDIRECTS = frozenset({301, 302, 303, 307, 308})
_CHUNK = 64 * 1024
_HEADER_NAME = re.compile(r"[!#$%&'*+\-.^_`|~0-9A-Za-z]+")
# Framing is aiohttp's to decide: a step's own value would corrupt the exchange.
_FRAMING_HEADERS = frozenset({"content-length", "transfer-encoding", "connection"})
_CREDENTIAL_HEADERS = ("Authorization", "Proxy-Authorization", "Cookie")
_BODY_HEADERS = ("Content-Type", "Content-Encoding", "Content-Language", "Content-Location")


class HttpRequest(BaseModel):
    """The input of ``orbit.http.request``, as the compiler builds it from an ``http:`` step."""

    model_config = ConfigDict(frozen=True)

    method: str = "GET"
    url: str
    headers: dict[str, JsonValue] | None = None
    body: JsonValue = None
    """A map or list is sent as JSON, a string as text; absent or null: no body."""
    timeout_ms: int | None = Field(None, ge=1)
    """The total time of the exchange; default ``ORBIT_HTTP_DEFAULT_TIMEOUT_MS``."""


class HttpResponse(BaseModel):
    """The output of ``orbit.http.request``."""

    status: int
    headers: dict[str, str]
    """Lower-case names; repeated headers joined with ``", "``."""
    body: JsonValue
    """Parsed JSON when the content type is JSON, else text."""


class CheckedResolver(AbstractResolver):
    """Resolves names with the system resolver and hands aiohttp only checked addresses.

    Raises :class:`~orbit_services.http_adapter.guard.DestinationForbidden` if any
    address is refused: a name that resolves to a private address among
    public ones is refused as a whole.
    """

    def __init__(self, guard: HttpGuard) -> None:
        self._guard = guard

    async def resolve(
        self, host: str, port: int = 0, family: socket.AddressFamily = socket.AF_INET
    ) -> list[ResolveResult]:
        loop = asyncio.get_running_loop()
        infos = await loop.getaddrinfo(
            host, port, type=socket.SOCK_STREAM, family=family, flags=socket.AI_ADDRCONFIG
        )
        found: dict[str, socket.AddressFamily] = {}
        for info_family, _type, _proto, _name, sockaddr in infos:
            if info_family in (socket.AF_INET, socket.AF_INET6):
                found.setdefault(str(sockaddr[0]), info_family)
        self._guard.check_resolved(host, list(found))
        return [
            ResolveResult(
                hostname=host,
                host=address,
                port=port,
                family=address_family,
                proto=0,
                flags=socket.AI_NUMERICHOST | socket.AI_NUMERICSERV,
            )
            for address, address_family in found.items()
        ]

    async def close(self) -> None:
        return None


@dataclass
class _Hop:
    """Where the exchange is: for messages."""

    method: str
    url: URL
    redirects: int = 0

    def describe(self) -> str:
        return f"{self.method} {safe_url(self.url)}"


class HttpAdapter:
    """Makes the requests of ``http:`` steps over one shared aiohttp session.

    Use it as ``async with HttpAdapter(...) as adapter`` (or :meth:`open` and
    :meth:`close`).

    Args:
        guard: The destination rules.
        max_response_bytes: The largest body read.
        max_redirects: Redirects followed; one more is ``HTTP_TOO_MANY_REDIRECTS``.
        default_timeout_ms: The total time of a request without ``timeout_ms``.
        concurrency: Connections open at once, at most.
    """

    def __init__(
        self,
        guard: HttpGuard | None = None,
        *,
        max_response_bytes: int = 1_048_576,
        max_redirects: int = 10,
        default_timeout_ms: int = 30_000,
        concurrency: int = 64,
    ) -> None:
        self.guard = guard or HttpGuard()
        self.max_response_bytes = max_response_bytes
        self.max_redirects = max_redirects
        self.default_timeout_ms = default_timeout_ms
        self.concurrency = concurrency
        self._session: aiohttp.ClientSession | None = None

    @classmethod
    def from_settings(cls, settings: Settings) -> HttpAdapter:
        return cls(
            HttpGuard(settings.http_allow_list),
            max_response_bytes=settings.http_max_response_bytes,
            max_redirects=settings.http_max_redirects,
            default_timeout_ms=settings.http_default_timeout_ms,
            concurrency=settings.http_adapter_concurrency,
        )

    async def open(self) -> None:
        if self._session is not None:
            return
        connector = aiohttp.TCPConnector(
            resolver=CheckedResolver(self.guard), limit=self.concurrency, ttl_dns_cache=10
        )
        self._session = aiohttp.ClientSession(
            connector=connector,
            # No proxy from the environment: it would connect where the guard cannot see.
            trust_env=False,
            # One session serves every workflow: a cookie set for one must not reach another.
            cookie_jar=aiohttp.DummyCookieJar(),
            timeout=aiohttp.ClientTimeout(total=None),
            headers={"User-Agent": USER_AGENT},
        )

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None

    async def __aenter__(self) -> HttpAdapter:
        await self.open()
        return self

    async def __aexit__(self, *_: object) -> None:
        await self.close()

    async def request(self, request: HttpRequest | dict[str, Any]) -> HttpResponse:
        """Make the request, following redirects; the final 2xx response.

        Raises:
            HttpStepError: With the codes in docs/http-steps.md.
        """
        if not isinstance(request, HttpRequest):
            request = HttpRequest.model_validate(request)
        method = request.method.upper()
        if method not in HTTP_METHODS:
            raise _invalid(f"{request.method!r} is not one of {', '.join(HTTP_METHODS)}")
        headers = _request_headers(request.headers)
        body = _request_body(request.body, headers)
        timeout_ms = request.timeout_ms or self.default_timeout_ms
        hop = _Hop(method, _url_or_empty(request.url))
        try:
            async with asyncio.timeout(timeout_ms / 1000):
                return await self._exchange(hop, request.url, headers, body, timeout_ms)
        except DestinationForbidden as refused:
            log.warning(
                "http step refused: %s",
                refused.message,
                extra={"action": "http.refused", "host": refused.host},
            )
            raise
        except HttpStepError:
            raise
        except TimeoutError:
            raise HttpStepError(
                HTTP_TIMEOUT,
                f"{hop.describe()} did not complete within {timeout_ms} ms",
                retryable=True,
                details={"url": safe_url(hop.url), "timeout_ms": timeout_ms},
            ) from None
        except aiohttp.InvalidURL as error:
            raise HttpStepError(
                HTTP_INVALID_URL,
                f"{hop.describe()}: the URL cannot be requested: {error}",
                retryable=False,
            ) from None
        except aiohttp.ClientConnectorCertificateError as error:
            raise HttpStepError(
                HTTP_TLS_ERROR,
                f"{hop.describe()}: the server's certificate is not valid:"
                f" {error.certificate_error}",
                retryable=False,
                details={"url": safe_url(hop.url)},
            ) from None
        except (aiohttp.ClientError, OSError) as error:
            raise HttpStepError(
                HTTP_CONNECTION_ERROR,
                f"{hop.describe()} failed: {type(error).__name__}: {error}",
                retryable=True,
                details={"url": safe_url(hop.url), "type": type(error).__name__},
            ) from None

    @property
    def session(self) -> aiohttp.ClientSession:
        if self._session is None:
            raise RuntimeError("the HTTP adapter is not open")
        return self._session

    async def _exchange(
        self,
        hop: _Hop,
        url: str | URL,
        headers: CIMultiDict[str],
        body: bytes | None,
        timeout_ms: int,
    ) -> HttpResponse:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_ms / 1000
        while True:
            destination = self.guard.check_url(url)
            hop.url = destination.url
            remaining = max(deadline - loop.time(), 0.001)
            async with self.session.request(
                hop.method,
                destination.url,
                headers=headers,
                data=body,
                allow_redirects=False,
                timeout=aiohttp.ClientTimeout(total=remaining),
            ) as response:
                location = response.headers.get("Location")
                if response.status in _REDIRECTS and location:
                    if hop.redirects >= self.max_redirects:
                        raise HttpStepError(
                            HTTP_TOO_MANY_REDIRECTS,
                            f"{hop.describe()} redirected more than {self.max_redirects} times"
                            " (ORBIT_HTTP_MAX_REDIRECTS)",
                            retryable=False,
                            details={"url": safe_url(hop.url), "redirects": hop.redirects + 1},
                        )
                    target = _redirect_target(hop, response.url, location)
                    hop.method, body = _redirected_method(response.status, hop.method, body)
                    headers = _redirected_headers(headers, destination.url, target, body)
                    hop.redirects += 1
                    url = target
                    continue
                if 200 <= response.status < 300:
                    return _output(response, await self._read(hop, response))
                # An error's body is only quoted: its start is enough, whatever its size.
                raise _status_error(hop, response, await _read_start(response))

    async def _read(self, hop: _Hop, response: aiohttp.ClientResponse) -> bytes:
        limit = self.max_response_bytes
        if hop.method != "HEAD" and (response.content_length or 0) > limit:
            raise self._too_large(hop, f"declares {response.content_length} bytes")
        chunks: list[bytes] = []
        size = 0
        async for chunk in response.content.iter_chunked(_CHUNK):
            size += len(chunk)
            if size > limit:
                raise self._too_large(hop, f"is longer than {limit} bytes")
            chunks.append(chunk)
        return b"".join(chunks)

    def _too_large(self, hop: _Hop, what: str) -> HttpStepError:
        return HttpStepError(
            HTTP_RESPONSE_TOO_LARGE,
            f"the response to {hop.describe()} {what}, more than the"
            f" {self.max_response_bytes} allowed (ORBIT_HTTP_MAX_RESPONSE_BYTES)",
            retryable=False,
            details={"url": safe_url(hop.url), "limit": self.max_response_bytes},
        )


def _url_or_empty(url: str) -> URL:
    try:
        return URL(url)
    except (ValueError, TypeError):
        return URL()


def _invalid(message: str) -> HttpStepError:
    return HttpStepError(HTTP_INVALID_REQUEST, message, retryable=False)


def _request_headers(given: dict[str, JsonValue] | None) -> CIMultiDict[str]:
    headers: CIMultiDict[str] = CIMultiDict()
    for name, value in (given or {}).items():
        if not _HEADER_NAME.fullmatch(name):
            raise _invalid(f"{name!r} is not a valid header name")
        if value is None or name.lower() in _FRAMING_HEADERS:
            continue
        if isinstance(value, bool):
            text = "true" if value else "false"
        elif isinstance(value, int | float | str):
            text = str(value)
        else:
            raise _invalid(
                f"header {name!r} must be a string or number, not {type(value).__name__}"
            )
        if any(character in text for character in "\r\n\0"):
            raise _invalid(f"header {name!r} contains a line break or NUL")
        headers[name] = text
    return headers


def _request_body(body: JsonValue, headers: CIMultiDict[str]) -> bytes | None:
    if body is None:
        return None
    if isinstance(body, str):
        headers.setdefault("Content-Type", "text/plain; charset=utf-8")
        return body.encode()
    headers.setdefault("Content-Type", "application/json")
    return json.dumps(body, ensure_ascii=False, separators=(",", ":")).encode()


def _redirect_target(hop: _Hop, base: URL, location: str) -> URL:
    try:
        return base.join(URL(location))
    except (ValueError, TypeError):
        raise HttpStepError(
            HTTP_INVALID_URL,
            f"{hop.describe()} redirected to {location[:200]!r}, which is not a URL",
            retryable=False,
        ) from None


def _redirected_method(status: int, method: str, body: bytes | None) -> tuple[str, bytes | None]:
    """The method and body after a redirect, as browsers do (RFC 9110 §15.4)."""
    if (status == 303 and method != "HEAD") or (status in (301, 302) and method == "POST"):
        return "GET", None
    return method, body


def _origin(url: URL) -> tuple[str, str | None, int | None]:
    return url.scheme, url.raw_host, url.port


def _redirected_headers(
    headers: CIMultiDict[str], source: URL, target: URL, body: bytes | None
) -> CIMultiDict[str]:
    kept = headers.copy()
    if body is None:
        for name in _BODY_HEADERS:
            kept.popall(name, None)
    if _origin(source) != _origin(target):
        for name in _CREDENTIAL_HEADERS:
            kept.popall(name, None)
    return kept


def _response_headers(response: aiohttp.ClientResponse) -> dict[str, str]:
    headers: dict[str, str] = {}
    for name, value in response.headers.items():
        key = name.lower()
        headers[key] = f"{headers[key]}, {value}" if key in headers else value
    return headers


def _is_json(content_type: str) -> bool:
    return content_type == "application/json" or content_type.endswith("+json")


def _reject_constant(name: str) -> None:
    raise ValueError(f"{name} is not JSON data")


def _text(data: bytes, charset: str | None) -> str:
    try:
        text = data.decode(charset or "utf-8", errors="replace")
    except LookupError:
        text = data.decode("utf-8", errors="replace")
    # Postgres cannot store NUL in a string: the output would be refused as a whole.
    return text.replace("\x00", "\ufffd")


def _response_body(response: aiohttp.ClientResponse, data: bytes) -> JsonValue:
    text = _text(data, response.charset)
    if not _is_json(response.content_type):
        return text
    if not text.strip():
        return None
    try:
        parsed: JsonValue = json.loads(text, parse_constant=_reject_constant)
    except (ValueError, RecursionError):
        return text  # says JSON, is not: the text is more use than a failure
    # JSON that cannot be stored (a \u0000 in a string) stays text too.
    return text if payload_problem(parsed) is not None else parsed


async def _read_start(response: aiohttp.ClientResponse) -> bytes:
    """The first bytes of the body, enough for the excerpt."""
    wanted = EXCERPT_CHARS * 4
    chunks: list[bytes] = []
    size = 0
    async for chunk in response.content.iter_chunked(_CHUNK):
        chunks.append(chunk)
        size += len(chunk)
        if size >= wanted:
            break
    return b"".join(chunks)[:wanted]


def _output(response: aiohttp.ClientResponse, data: bytes) -> HttpResponse:
    return HttpResponse(
        status=response.status,
        headers=_response_headers(response),
        body=_response_body(response, data),
    )


def _status_error(hop: _Hop, response: aiohttp.ClientResponse, data: bytes) -> HttpStepError:
    status = response.status
    excerpt = _text(data, response.charset)[:EXCERPT_CHARS]
    reason = f" {response.reason}" if response.reason else ""
    shown = " ".join(excerpt.split())[:200]
    details: dict[str, JsonValue] = {"status": status, "url": safe_url(hop.url), "body": excerpt}
    retry_after = response.headers.get("Retry-After")
    if retry_after is not None:
        details["retry_after"] = retry_after
    return HttpStepError(
        f"HTTP_{status}",
        f"{hop.describe()} answered {status}{reason}" + (f": {shown}" if shown else ""),
        retryable=status >= 500 or status == 429,
        details=details,
    )
