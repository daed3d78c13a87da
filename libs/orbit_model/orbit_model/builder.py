"""Source models to IR: defaults merged, kinds resolved, expressions respelled.

The builder checks only what the IR can no longer show: which kind a step
is and which keys that kind takes, the form of ``if`` and ``for``, and where
a retry field came from. Everything that can be checked on the IR is left to
:mod:`orbit_model.checks`, so compiled JSON gets the same checks.
"""

from __future__ import annotations

import typing
from typing import Any

from orbit_model import names
from orbit_model.checks import Finding
from orbit_model.expressions import canonical_expression, expression_source
from orbit_model.ir import (
    HTTP_TASK,
    WORKFLOW_TASK_PREFIX,
    AwaitStep,
    CallStep,
    ChildRef,
    Compensation,
    RetryPolicy,
    SleepStep,
    Step,
    TaskCall,
    TaskContract,
    Timeouts,
    WorkflowIR,
)
from orbit_model.source import (
    SourceCompensate,
    SourceDefaults,
    SourceHttp,
    SourceRetry,
    SourceStep,
    SourceWorkflow,
)
from orbit_model.yaml_source import Path

LANGUAGE_VERSION = 1
STEP_KINDS = ("task", "await", "sleep", "workflow", "http")
CallKind = typing.Literal["task", "http", "workflow"]

_COMMON_FIELDS = frozenset({"id", "after", "if_"})
_POLICY = frozenset({"retry", "timeout", "schedule_timeout", "heartbeat_timeout", "compensate"})
_ALLOWED_FIELDS = {
    "task": _POLICY | {"task", "input", "for_", "concurrency", "continue_on_error"},
    "http": _POLICY | {"http", "continue_on_error"},
    "workflow": frozenset(
        {"workflow", "input", "for_", "concurrency", "retry", "timeout", "compensate"}
        | {"continue_on_error"}
    ),
    "await": frozenset({"await_", "timeout", "continue_on_error"}),
    "sleep": frozenset({"sleep"}),
}
_NOT_IN_FINALLY = frozenset({"for_", "concurrency", "compensate"})
_DEFAULT_RETRY_PATH: Path = ("defaults", "retry")


def build_workflow(source: SourceWorkflow) -> tuple[WorkflowIR | None, list[Finding]]:
    """The IR of a structurally valid source, or None and what is wrong."""
    builder = _Builder(source)
    ir = builder.build()
    return ir, builder.findings


class _Builder:
    def __init__(self, source: SourceWorkflow) -> None:
        self.source = source
        self.defaults = source.defaults or SourceDefaults()
        self._findings: dict[Finding, None] = {}
        """What is wrong, each once, in the order found (a dict: a list's search
        for a repeat grows with the square of the problems)."""

    @property
    def findings(self) -> list[Finding]:
        return list(self._findings)

    def problem(self, path: Path, message: str) -> None:
        self._findings[path, message] = None

    def build(self) -> WorkflowIR | None:
        source = self.source
        if source.orbit != LANGUAGE_VERSION:
            self.problem(
                ("orbit",),
                f"unsupported language version {source.orbit}; this Orbit reads orbit: 1",
            )
        # Checked on its own, so a bad default is reported once, at its place,
        # even if no step inherits it.
        self.retry(None, self.defaults.retry, ())
        queries = {name: _respell(query) for name, query in (source.queries or {}).items()}
        tasks = {
            name: TaskContract(
                version=task.version, input_schema=task.input, output_schema=task.output
            )
            for name, task in (source.tasks or {}).items()
        }
        steps = [
            self.step(step, ("steps", index), source.steps, in_finally=False)
            for index, step in enumerate(source.steps)
        ]
        final = source.finally_ or []
        finally_steps = [
            self.step(step, ("finally", index), final, in_finally=True)
            for index, step in enumerate(final)
        ]
        if "output" in source.model_fields_set:
            output = _respell(source.output)
        else:
            output = _step_output_expression(source.steps[-1].id)
        if self._findings:
            return None
        return WorkflowIR(
            name=source.workflow,
            version=source.version,
            description=source.description,
            timeout_ms=source.timeout,
            input_schema=source.input,
            output_schema=source.output_schema,
            signals=dict(source.signals or {}),
            queries=queries,
            tasks=tasks,
            steps=tuple(step for step in steps if step is not None),
            finally_steps=tuple(step for step in finally_steps if isinstance(step, CallStep)),
            output=output,
        )

    def _kind(self, step: SourceStep, path: Path) -> str | None:
        """The one step kind ``step`` is written as, or None (and a problem)."""
        for kind in STEP_KINDS:
            if _field(kind) in step.model_fields_set and getattr(step, _field(kind)) is None:
                self.problem((*path, kind), f"{kind!r} needs a value")
        kinds = [kind for kind in STEP_KINDS if getattr(step, _field(kind)) is not None]
        if len(kinds) != 1:
            given = " and ".join(kinds) if kinds else "none"
            self.problem(
                path, f"a step needs exactly one of {', '.join(STEP_KINDS)} (this one has {given})"
            )
            return None
        return kinds[0]

    def step(
        self, step: SourceStep, path: Path, siblings: list[SourceStep], in_finally: bool
    ) -> Step | None:
        kind = self._kind(step, path)
        if kind is None:
            return None
        if in_finally and kind not in ("task", "http"):
            self.problem(path, f"finally steps run tasks or http requests, not {kind}")
            return None
        allowed = _ALLOWED_FIELDS[kind] - (_NOT_IN_FINALLY if in_finally else frozenset())
        for field in sorted(step.model_fields_set - allowed - _COMMON_FIELDS):
            key = _alias(field)
            where = "in finally" if in_finally else f"on {_article(kind)} {kind} step"
            self.problem((*path, key), f"{key!r} is not allowed {where}")
        position = path[1]
        assert isinstance(position, int)
        after: tuple[str, ...]
        if step.after is None:
            after, explicit = ((siblings[position - 1].id,) if position > 0 else ()), False
        else:
            after, explicit = tuple(dict.fromkeys(step.after)), True
        common: dict[str, Any] = {
            "id": step.id,
            "after": after,
            "explicit_after": explicit,
            "when": self.condition(step, path),
            "continue_on_error": step.continue_on_error,
        }
        if step.await_ is not None:
            return AwaitStep(kind="await", signal=step.await_, timeout_ms=step.timeout, **common)
        if step.sleep is not None:
            return SleepStep(kind="sleep", duration_ms=step.sleep, **common)
        call, child = self.call(step, kind, path)
        for_each = self.fan_out(step, path)
        concurrency = step.concurrency
        if concurrency is not None and for_each is None:
            self.problem(
                (*path, "concurrency"), "caps the units of a for step; this step has no for"
            )
        elif concurrency is not None and concurrency < 1:
            self.problem((*path, "concurrency"), "must be at least 1")
        compensate = self.compensation(step.compensate, (*path, "compensate"))
        if call is None or self._findings:
            return None
        return CallStep(
            kind=typing.cast(CallKind, kind),
            call=call,
            child=child,
            for_each=for_each,
            concurrency=concurrency,
            compensate=compensate,
            **common,
        )

    def condition(self, step: SourceStep, path: Path) -> Any:
        if "if_" not in step.model_fields_set:
            return None
        if not isinstance(step.if_, bool) and expression_source(step.if_) is None:
            self.problem((*path, "if"), "must be true, false or an expression ${ … }")
        return _respell(step.if_)

    def fan_out(self, step: SourceStep, path: Path) -> Any:
        if "for_" not in step.model_fields_set:
            return None
        if not isinstance(step.for_, list) and expression_source(step.for_) is None:
            self.problem((*path, "for"), "must be a list or an expression ${ … }")
        return _respell(step.for_)

    def call(
        self, step: SourceStep, kind: str, path: Path
    ) -> tuple[TaskCall | None, ChildRef | None]:
        if kind == "workflow":
            assert step.workflow is not None
            child = self.child(step.workflow, (*path, "workflow"))
            retry = self.retry(step.retry, None, path, default_attempts=1)
            if child is None or retry is None:
                return None, None
            call = TaskCall(
                task=WORKFLOW_TASK_PREFIX + child.name,
                input=_respell(step.input),
                retry=retry,
                timeouts=Timeouts(attempt_ms=step.timeout),
            )
            return call, child
        if kind == "http":
            assert step.http is not None
            return self.task_call(HTTP_TASK, _http_request(step.http), step, path), None
        assert step.task is not None
        if not self.user_task(step.task, (*path, "task")):
            return None, None
        return self.task_call(step.task, _respell(step.input), step, path), None

    def task_call(
        self, task: str, input_template: Any, policy: SourceStep | SourceCompensate, path: Path
    ) -> TaskCall | None:
        defaults = self.defaults
        retry = self.retry(policy.retry, defaults.retry, path)
        if retry is None:
            return None
        return TaskCall(
            task=task,
            input=input_template,
            retry=retry,
            timeouts=Timeouts(
                attempt_ms=_first(policy.timeout, defaults.timeout),
                schedule_ms=_first(policy.schedule_timeout, defaults.schedule_timeout),
                heartbeat_ms=_first(policy.heartbeat_timeout, defaults.heartbeat_timeout),
            ),
        )

    def retry(
        self,
        own: SourceRetry | None,
        inherited: SourceRetry | None,
        path: Path,
        default_attempts: int = 3,
    ) -> RetryPolicy | None:
        """The step's retry fields over the defaults' fields, over Orbit's defaults.

        A bad value is reported where it was written: on the step, or in
        ``defaults.retry``.
        """

        def pick(field: str, fallback: Any) -> tuple[Any, Path]:
            for source, where in ((own, (*path, "retry")), (inherited, _DEFAULT_RETRY_PATH)):
                value = getattr(source, field) if source is not None else None
                if value is not None:
                    return value, (*where, field)
            return fallback, ()

        attempts, attempts_at = pick("max_attempts", default_attempts)
        initial, initial_at = pick("initial_interval", 1000)
        backoff, backoff_at = pick("backoff", 2.0)
        maximum, maximum_at = pick("max_interval", 100 * initial)
        codes, codes_at = pick("non_retryable", [])
        problems = [
            (attempts_at, "must be at least 1 (1 means no retry)", attempts < 1),
            (backoff_at, "must be at least 1.0", backoff < 1.0),
            (
                _most_specific(maximum_at, initial_at, under=(*path, "retry")),
                "max_interval must not be shorter than initial_interval",
                maximum < initial,
            ),
            (codes_at, "error codes must not be empty", any(not code for code in codes)),
        ]
        failed = [(where, message) for where, message, bad in problems if bad]
        for where, message in failed:
            self.problem(where, message)
        if failed:
            return None
        return RetryPolicy(
            max_attempts=attempts,
            initial_interval_ms=initial,
            backoff=backoff,
            max_interval_ms=maximum,
            non_retryable=tuple(sorted(set(codes))),
        )

    def compensation(self, compensate: SourceCompensate | None, path: Path) -> Compensation | None:
        if compensate is None:
            return None
        call = self.task_call(compensate.task, _respell(compensate.input), compensate, path)
        return Compensation(call=call) if call is not None else None

    def user_task(self, task: str, path: Path) -> bool:
        """Whether a task step may name ``task``: the built-in HTTP task has its own kind."""
        # Other reserved names are reported on the IR, with the declarations.
        if task == HTTP_TASK:
            self.problem(path, f"{HTTP_TASK} is built in: write an http: step to make a request")
            return False
        return True

    def child(self, reference: str, path: Path) -> ChildRef | None:
        name, at, version = reference.partition("@")
        if not at or not names.WORKFLOW_NAME.fullmatch(name) or not names.SEMVER.fullmatch(version):
            self.problem(path, f"{reference!r} is not a child reference such as send-invoice@1.0.0")
            return None
        return ChildRef(name=name, version=version)


def _http_request(http: SourceHttp) -> dict[str, Any]:
    """The input of the built-in HTTP task; its values are checked on the IR."""
    request: dict[str, Any] = {"method": http.method.upper(), "url": _respell(http.url)}
    if http.headers is not None:
        request["headers"] = _respell(http.headers)
    if "body" in http.model_fields_set:
        request["body"] = _respell(http.body)
    if http.timeout is not None:
        request["timeout_ms"] = http.timeout
    return request


def _respell(value: Any) -> Any:
    """A template with every expression spelled canonically."""
    source = expression_source(value)
    if source is not None:
        return canonical_expression(source)
    if isinstance(value, dict):
        return {key: _respell(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_respell(item) for item in value]
    return value


def _step_output_expression(step_id: str) -> str:
    """``${ steps.ID.output }``, indexing by string when the id is no CEL identifier."""
    if names.CEL_IDENTIFIER.fullmatch(step_id):
        return canonical_expression(f"steps.{step_id}.output")
    return canonical_expression(f'steps["{step_id}"].output')


def _field(kind: str) -> str:
    """The source field of a step kind (``await`` is a Python keyword)."""
    return {"await": "await_"}.get(kind, kind)


def _alias(field: str) -> str:
    return SourceStep.model_fields[field].alias or field


def _most_specific(*places: Path, under: Path) -> Path:
    """The first place written on the step itself, else the first written at all."""
    written = [place for place in places if place]
    own = [place for place in written if place[: len(under)] == under]
    return (own or written or [()])[0]


def _article(word: str) -> str:
    return "an" if word[0] in "aeiouh" else "a"


def _first(*values: Any) -> Any:
    return next((value for value in values if value is not None), None)
