"""The HTTP client of Orbit's gateway.

::

    async with OrbitClient("http://127.0.0.1:8080", token=os.environ["ORBIT_TOKEN"]) as orbit:
        await orbit.deploy("examples/")
        started = await orbit.start("hello-world", {"name": "ada"})
        done = await orbit.wait(started["execution_id"], timeout=30)

Inputs and payloads are JSON data; answers are the API's JSON (SPEC §2) as
plain data. Every error the gateway answers with, and a gateway that cannot
be reached, raises :class:`OrbitClientError` with the API's error code.
"""

from __future__ import annotations

import builtins
import json
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any, Literal
from urllib.parse import quote, urlsplit

from orbit_model.errors import ErrorCode, OrbitError
from orbit_sdk.sources import children_first, read_sources

if TYPE_CHECKING:
    # httpx is imported by a client made, not by every module that imports this one:
    # beside rich and click (the cli extra), importing it loads its own command line.
    import httpx

    # The view models load with the calls that answer with one (see _execution).
    from orbit_model.views import ExecutionPage, ExecutionView

TERMINAL = frozenset({"completed", "failed", "cancelled", "timed_out"})
WAIT_CHUNK_SECONDS = 30.0
"""The longest single ``?wait=`` request :meth:`OrbitClient.wait` makes."""
BATCH_STARTS = 1000
"""Starts one batch request carries at most (the gateway's limit)."""
BATCH_BYTES = 1024 * 1024
"""About how large one batch request grows before the next begins: well inside the
gateway's body limit (``ORBIT_MAX_PAYLOAD_BYTES`` and 64 KiB)."""


class OrbitClientError(OrbitError):
    """An error answer of the gateway, or no answer at all.

    Attributes:
        code: The API's error code (``WORKFLOW_NOT_FOUND``, ...), as the gateway
            sent it; ``UNAVAILABLE`` when the gateway cannot be reached,
            ``HTTP_<status>`` for an answer without an Orbit error body.
        message: For people.
        status: The HTTP status; 0 when there was no answer.
    """

    def __init__(self, code: str, message: str, status: int) -> None:
        super().__init__(code, message)
        self.status = status


def _error_of(response: httpx.Response) -> OrbitClientError:
    try:
        error = response.json()["error"]
        return OrbitClientError(str(error["code"]), str(error["message"]), response.status_code)
    except (ValueError, KeyError, TypeError):
        text = response.text.strip()[:200] or response.reason_phrase
        return OrbitClientError(f"HTTP_{response.status_code}", text, response.status_code)


def _segment(value: str) -> str:
    return quote(value, safe="")


def gateway_urls(url: str | Sequence[str]) -> tuple[str, ...]:
    """The gateways of ``url``: one base URL, a comma-separated list, or a sequence.

    Raises:
        ValueError: No URL, or one that is not http:// or https://.
    """
    entries = url.split(",") if isinstance(url, str) else list(url)
    urls = tuple(entry.strip().rstrip("/") for entry in entries if entry.strip())
    if not urls:
        raise ValueError("no gateway URL given")
    for entry in urls:
        parts = urlsplit(entry)
        if parts.scheme not in ("http", "https") or not parts.netloc:
            raise ValueError(f"{entry!r} is not an http:// or https:// URL")
    return urls


_GATEWAY_AWAY = frozenset({502, 503, 504})
"""Answers that say this gateway (or the proxy before it) cannot serve now."""


def _unreachable(urls: Sequence[str], error: Exception) -> OrbitClientError:
    where = urls[0] if len(urls) == 1 else f"any of {', '.join(urls)}"
    return OrbitClientError(
        ErrorCode.UNAVAILABLE, f"cannot reach the gateway at {where}: {error!r}", 0
    )


class OrbitClient:
    """Calls the gateway's ``/v1`` API; use it as an async context manager (or :meth:`close`).

    Given several gateways, it sends each request to the one that last
    answered, and moves to the next when that one cannot be reached. A request
    that never reached a gateway (connection refused, no connection within the
    timeout) is always sent to the next. One that may have reached it (the
    answer did not come, or came as 502, 503 or 504) is sent again only if
    sending it twice changes nothing: reads, definitions, starts with an
    execution id and signals with a request id; anything else fails with
    ``UNAVAILABLE``, for the caller to decide.

    Args:
        url: The gateway's base URL, or several (a sequence, or one string of
            comma-separated URLs).
        timeout: Seconds a request may take (a ``wait`` adds its own wait to it).
        token: The API token sent with every request (``Authorization: Bearer``); None:
            none is sent (a gateway with ``ORBIT_AUTH=disabled``).
        transport: An httpx transport, for tests or custom networking.
    """

    def __init__(
        self,
        url: str | Sequence[str] = "http://127.0.0.1:8080",
        timeout: float = 10.0,
        *,
        token: str | None = None,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        self.urls = gateway_urls(url)
        self._current = 0
        self.timeout = timeout
        headers = {"authorization": f"Bearer {token}"} if token else None
        import httpx  # noqa: PLC0415  (see the imports)

        self._http = httpx.AsyncClient(timeout=timeout, transport=transport, headers=headers)

    @property
    def url(self) -> str:
        """The gateway requests go to now."""
        return self.urls[self._current]

    async def close(self) -> None:
        await self._http.aclose()

    async def __aenter__(self) -> OrbitClient:
        return self

    async def __aexit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        await self.close()

    async def _request(
        self,
        method: str,
        path: str,
        *,
        timeout: float | None = None,
        idempotent: bool = False,
        **kwargs: Any,
    ) -> Any:
        """Send one request, moving to the next gateway as the class says."""
        import httpx  # noqa: PLC0415  (loaded by __init__ already)

        repeatable = idempotent or method == "GET"
        # Each request walks the gateways from the one that answered last, on its own:
        # concurrent requests failing on the same gateway must not turn each other back.
        start = self._current
        order = [(start + step) % len(self.urls) for step in range(len(self.urls))]
        for index in order:
            url = self.urls[index]
            more = index != order[-1]
            try:
                response = await self._http.request(
                    method, url + path, timeout=timeout or self.timeout, **kwargs
                )
            except (httpx.ConnectError, httpx.ConnectTimeout) as error:
                if more:  # it never got there: any request may go to the next
                    continue
                raise _unreachable(self.urls, error) from error
            except httpx.TransportError as error:
                if more and repeatable:
                    continue
                raise _unreachable((url,), error) from error
            if response.status_code in _GATEWAY_AWAY and more and repeatable:
                continue
            self._current = index  # the next requests go where this one was answered
            if response.is_error:
                raise _error_of(response)
            return response.json() if response.content else None
        raise AssertionError("unreachable: the last gateway answers or raises")

    # -- definitions ------------------------------------------------------------

    async def deploy(self, *sources: str | Path) -> list[dict[str, Any]]:
        """Register workflow definitions: files, directories of ``*.yaml``, or YAML texts.

        Each is compiled here first, so a broken file is reported with its
        line before anything is sent; child workflows are registered before
        the workflows that start them.

        Returns:
            The gateway's answer for each, in the order sent:
            ``{name, version, hash, created}``.

        Raises:
            orbit_model.DefinitionError: A file does not compile.
            OrbitClientError: The gateway refused one (those before it stay registered).
            DefinitionProblem: ``INVALID_DEFINITION`` (a ``ValueError`` too) when the
                definitions start each other in a cycle.
        """
        # The compiler (CEL, JSON Schema) only for those who deploy.
        from orbit_model.compiler import compile_definition  # noqa: PLC0415

        compiled = [(text, compile_definition(text, name)) for name, text in read_sources(sources)]
        results = []
        for text, _ in children_first(compiled):
            results.append(
                await self._request(
                    "POST",
                    "/v1/definitions",
                    content=text.encode(),
                    headers={"content-type": "application/yaml"},
                    idempotent=True,  # the same definition again is "created: false"
                )
            )
        return results

    async def definitions(self) -> list[dict[str, Any]]:
        """Every registered definition: ``[{name, version, hash, registered_at}]``."""
        result: list[dict[str, Any]] = await self._request("GET", "/v1/definitions")
        return result

    async def definition(self, name: str, version: str) -> dict[str, Any]:
        """The compiled IR of one definition."""
        result: dict[str, Any] = await self._request(
            "GET", f"/v1/definitions/{_segment(name)}/{_segment(version)}"
        )
        return result

    # -- executions -------------------------------------------------------------

    async def start(
        self,
        workflow: str,
        input: Any = None,
        version: str | None = None,
        execution_id: str | None = None,
        *,
        wait: bool = False,
        wait_timeout: float = 60.0,
        on_conflict: Literal["fail", "use_existing"] = "fail",
    ) -> dict[str, Any]:
        """Start an execution: ``{execution_id, created}`` (``created: false`` for a
        start of a known id made again).

        ``version`` None starts the highest registered version. With ``wait``,
        the answer also holds ``execution``, the execution once it has ended (an
        :class:`~orbit_model.views.ExecutionView`):
        the same request starts it and waits (``POST /v1/executions?wait=``),
        answered as soon as the ending commits. A known id started with another
        version or input is refused (``EXECUTION_EXISTS``), unless ``on_conflict``
        is ``use_existing``: then the existing execution is answered.

        Raises:
            OrbitClientError: ``EXECUTION_EXISTS``, and any other refusal.
            TimeoutError: With ``wait``, it is still running after ``wait_timeout``
                seconds (it was started all the same).
        """
        body: dict[str, Any] = {"workflow": workflow, "input": input}
        if version is not None:
            body["version"] = version
        if execution_id is not None:
            body["execution_id"] = execution_id
        if on_conflict != "fail":
            body["on_conflict"] = on_conflict
        deadline = time.monotonic() + wait_timeout
        chunk = min(wait_timeout, WAIT_CHUNK_SECONDS)
        # With its id, a start sent twice starts it once ("created: false").
        result: dict[str, Any] = await self._request(
            "POST",
            "/v1/executions",
            json=body,
            idempotent=execution_id is not None,
            params={"wait": f"{chunk:.3f}"} if wait else None,
            timeout=self.timeout + chunk if wait else None,
        )
        if not wait:
            return result
        result["execution"] = _execution(result["execution"])
        if result["execution"].status not in TERMINAL:
            left = max(0.0, deadline - time.monotonic())
            result["execution"] = await self.wait(result["execution_id"], left)
        return result

    async def start_batch(
        self,
        starts: Iterable[Mapping[str, Any]],
        on_progress: Callable[[int], None] | None = None,
    ) -> builtins.list[dict[str, Any]]:
        """Start many executions: a result per start, in order (``POST /v1/executions/batch``).

        Each start is ``{workflow, version?, input?, execution_id?, on_conflict?}``; each result
        ``{execution_id, created}``, or with ``error: {code, message}`` for one
        the gateway refused (the others are started all the same). They are sent
        in requests of up to 1,000 starts and about 1 MiB; ``on_progress`` is
        called with how many were answered so far after each. A request whose
        starts all name their id is sent again to the next gateway if one fails.

        Raises:
            OrbitClientError: A whole request was refused or not answered (the
                starts of the requests before it are started).
        """
        results: builtins.list[dict[str, Any]] = []
        for chunk in _batches(starts):
            answer = await self._request(
                "POST",
                "/v1/executions/batch",
                json={"executions": chunk},
                idempotent=all(item.get("execution_id") for item in chunk),
            )
            results.extend(answer["results"])
            if on_progress is not None:
                on_progress(len(results))
        return results

    async def get(self, execution_id: str, wait: float | None = None) -> ExecutionView:
        """The execution: status, input, output, error and every step.

        With ``wait`` (seconds, at most 60), answered once it has ended or when
        the wait is over, whichever comes first.
        """
        result = await self._request(
            "GET",
            f"/v1/executions/{_segment(execution_id)}",
            params=None if wait is None else {"wait": f"{wait:.3f}"},
            timeout=None if wait is None else self.timeout + wait,
        )
        return _execution(result)

    async def wait(self, execution_id: str, timeout: float = 60.0) -> ExecutionView:
        """The execution once it has ended (completed, failed, cancelled or timed out).

        Raises:
            TimeoutError: It is still running after ``timeout`` seconds.
        """
        deadline = time.monotonic() + timeout
        path = f"/v1/executions/{_segment(execution_id)}"
        while True:
            left = deadline - time.monotonic()
            chunk = max(0.0, min(left, WAIT_CHUNK_SECONDS))
            answer = await self._request(
                "GET", path, params={"wait": f"{chunk:.3f}"}, timeout=self.timeout + chunk
            )
            execution = _execution(answer)
            if execution.status in TERMINAL:
                return execution
            if time.monotonic() >= deadline:
                raise TimeoutError(
                    f"execution {execution_id} is still {execution.status} after {timeout:g}s"
                )

    async def signal(
        self, execution_id: str, name: str, payload: Any = None, request_id: str | None = None
    ) -> int:
        """Send a signal; the sequence number it was recorded at.

        With a ``request_id``, sending it again (say, after a timeout) records it
        once, and answers the first one's sequence number.
        """
        result = await self._request(
            "POST",
            f"/v1/executions/{_segment(execution_id)}/signals/{_segment(name)}",
            json=payload,
            params=None if request_id is None else {"request_id": request_id},
            idempotent=request_id is not None,
        )
        return int(result["seq"])

    async def cancel(self, execution_id: str, reason: str = "") -> ExecutionView:
        """Cancel an execution (its compensation and cleanup run); the execution."""
        result = await self._request(
            "POST", f"/v1/executions/{_segment(execution_id)}/cancel", json={"reason": reason}
        )
        return _execution(result)

    async def query(self, execution_id: str, name: str) -> Any:
        """The value of a query of the execution."""
        result = await self._request(
            "GET", f"/v1/executions/{_segment(execution_id)}/queries/{_segment(name)}"
        )
        return result["value"]

    async def history(self, execution_id: str) -> list[dict[str, Any]]:
        """The execution's events: ``[{seq, recorded_at, type, data}]``."""
        result: list[dict[str, Any]] = await self._request(
            "GET", f"/v1/executions/{_segment(execution_id)}/history"
        )
        return result

    async def list(
        self,
        status: str | None = None,
        workflow: str | None = None,
        limit: int | None = None,
        cursor: str | None = None,
    ) -> ExecutionPage:
        """A page of executions, newest first: ``{items, next_cursor}``.

        Pass ``next_cursor`` back as ``cursor`` for the next page; it is None
        on the last.
        """
        params = {
            key: value
            for key, value in (
                ("status", status),
                ("workflow", workflow),
                ("limit", limit),
                ("cursor", cursor),
            )
            if value is not None
        }
        result = await self._request("GET", "/v1/executions", params=params)
        return _page(result)

    async def workers(self) -> builtins.list[dict[str, Any]]:
        """The workers seen in the last hour, with their contracts and sessions."""
        result: builtins.list[dict[str, Any]] = await self._request("GET", "/v1/workers")
        return result

    async def deciders(self) -> dict[str, Any]:
        """The deciders and the partitions each holds: ``{partitions, deciders, unowned,
        balanced}`` (docs/scaling.md)."""
        result: dict[str, Any] = await self._request("GET", "/v1/deciders")
        return result

    # -- API tokens (the admin scope) -------------------------------------------

    async def tokens(self) -> builtins.list[dict[str, Any]]:
        """Every API token: name, scopes, workflows, created, expires, revoked, last used."""
        result: builtins.list[dict[str, Any]] = await self._request("GET", "/v1/tokens")
        return result

    async def create_token(
        self,
        name: str,
        scopes: Iterable[str],
        workflows: Iterable[str] = (),
        expires_in: str | None = None,
    ) -> dict[str, Any]:
        """Make an API token; the answer's ``token`` is its secret, shown this once."""
        body = {
            "name": name,
            "scopes": builtins.list(scopes),
            "workflows": builtins.list(workflows),
            "expires_in": expires_in,
        }
        result: dict[str, Any] = await self._request("POST", "/v1/tokens", json=body)
        return result

    async def revoke_token(self, name: str) -> dict[str, Any]:
        """Revoke an API token: every gateway refuses it from now on."""
        result: dict[str, Any] = await self._request("POST", f"/v1/tokens/{_segment(name)}/revoke")
        return result


# -- batches --------------------------------------------------------------------


# The view models load with the first call that reads a view: a worker imports this
# module's names without ever reading one.


def _execution(answer: Any) -> ExecutionView:
    from orbit_model.views import ExecutionView  # noqa: PLC0415

    return ExecutionView.model_validate(answer)


def _page(answer: Any) -> ExecutionPage:
    from orbit_model.views import ExecutionPage  # noqa: PLC0415

    return ExecutionPage.model_validate(answer)


def _batches(starts: Iterable[Mapping[str, Any]]) -> Iterator[list[dict[str, Any]]]:
    """The starts in requests of at most :data:`BATCH_STARTS` and about :data:`BATCH_BYTES`."""
    chunk: list[dict[str, Any]] = []
    size = 0
    for start in starts:
        item = dict(start)
        item_size = len(json.dumps(item, separators=(",", ":")))
        if chunk and (len(chunk) >= BATCH_STARTS or size + item_size > BATCH_BYTES):
            yield chunk
            chunk, size = [], 0
        chunk.append(item)
        size += item_size + 1
    if chunk:
        yield chunk
