"""The shape of a workflow file as written, before it is compiled.

These models check structure only (known keys, types, durations); the
compiler turns them into the IR and checks meaning. They are strict, so a
YAML value of the wrong type is an error rather than a silent conversion;
versions are the exception, since ``version: 1`` and ``version: "1"`` mean
the same to a reader.
"""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, JsonValue

from orbit_model.durations import parse_duration


def _version_text(value: Any) -> Any:
    # An unquoted integer (`version: 2`) reads as the text "2"; an unquoted
    # float stays an error, since YAML has already turned 1.10 into 1.1.
    if isinstance(value, int) and not isinstance(value, bool):
        return str(value)
    if isinstance(value, float):
        raise ValueError(f"YAML reads this version as the number {value}; quote it")
    return value


def _duration_ms(value: Any) -> Any:
    if isinstance(value, str):
        return parse_duration(value)
    if isinstance(value, int | float) and not isinstance(value, bool):
        raise ValueError(f"{value} has no unit; write it as {value}s, {value}ms, {value}m, …")
    return value


Duration = Annotated[int, BeforeValidator(_duration_ms)]
"""A duration as written (``30s``, ``PT1M``), validated into milliseconds."""
VersionText = Annotated[str, BeforeValidator(_version_text)]


class _Source(BaseModel):
    model_config = ConfigDict(strict=True, extra="forbid")


class SourceRetry(_Source):
    max_attempts: int | None = None
    initial_interval: Duration | None = None
    backoff: float | None = None
    max_interval: Duration | None = None
    non_retryable: list[str] | None = None


class _Timeouts(_Source):
    retry: SourceRetry | None = None
    timeout: Duration | None = None
    schedule_timeout: Duration | None = None
    heartbeat_timeout: Duration | None = None


class SourceDefaults(_Timeouts):
    pass


class SourceCompensate(_Timeouts):
    task: str
    input: JsonValue = None


class SourceHttp(_Source):
    method: str = "GET"
    url: str
    headers: dict[str, JsonValue] | None = None
    body: JsonValue = None
    timeout: Duration | None = None


class SourceStep(_Timeouts):
    id: str
    task: str | None = None
    await_: str | None = Field(None, alias="await")
    sleep: Duration | None = None
    workflow: str | None = None
    http: SourceHttp | None = None
    for_: JsonValue = Field(None, alias="for")
    concurrency: int | None = None
    input: JsonValue = None
    if_: JsonValue = Field(None, alias="if")
    after: list[str] | None = None
    compensate: SourceCompensate | None = None
    continue_on_error: bool = False


class SourceTask(_Source):
    version: VersionText
    input: JsonValue = None
    output: JsonValue = None


class SourceWorkflow(_Source):
    orbit: int
    workflow: str
    version: VersionText
    description: str | None = None
    timeout: Duration | None = None
    input: JsonValue = None
    output_schema: JsonValue = None
    signals: dict[str, JsonValue] | None = None
    queries: dict[str, str] | None = None
    tasks: dict[str, SourceTask] | None = None
    defaults: SourceDefaults | None = None
    steps: list[SourceStep] = Field(min_length=1)
    finally_: list[SourceStep] | None = Field(None, alias="finally")
    output: JsonValue = None
