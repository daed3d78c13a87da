"""Workflow YAML to IR: parse with lines, check structure, build, check meaning.

``compile_definition`` is the one entry point for YAML; ``definition_from_ir``
takes compiled JSON (as an API client may send it) through the same checks.
Either returns a :class:`Definition` or raises :class:`DefinitionError`
listing every problem as ``FILE:LINE: path: what is wrong``.
"""

from __future__ import annotations

import re
import types
import typing
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ValidationError

from orbit_model.checks import Finding, check_workflow
from orbit_model.contracts import SchemaProblem, check_schema
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
    TaskCall,
    TaskContract,
    Timeouts,
    WorkflowIR,
)
from orbit_model.problems import DefinitionError, Problem, did_you_mean, format_path
from orbit_model.source import (
    SourceCompensate,
    SourceDefaults,
    SourceHttp,
    SourceRetry,
    SourceStep,
    SourceWorkflow,
)
from orbit_model.yaml_source import Path, SourceDocument, YamlSourceError, load_yaml

LANGUAGE_VERSION = 1
WORKFLOW_NAME = re.compile(r"[a-z0-9][a-z0-9_.-]{0,99}")
SEMVER = re.compile(
    r"(0|[1-9]\d*)\.(0|[1-9]\d*)\.(0|[1-9]\d*)(-[0-9A-Za-z.-]+)?(\+[0-9A-Za-z.-]+)?"
)
TASK_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,99}")
CONTRACT_VERSION = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.+-]{0,49}")
IDENTIFIER = re.compile(r"[A-Za-z][A-Za-z0-9_-]{0,99}")
HTTP_METHODS = ("GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS")
RESERVED_TASK_PREFIX = "orbit."
STEP_KINDS = ("task", "await", "sleep", "workflow", "http")
CallKind = typing.Literal["task", "http", "workflow"]


@dataclass(frozen=True)
class Definition:
    """A compiled, checked workflow and its identity.

    Attributes:
        ir: The compiled workflow.
        hash: ``sha256:…`` of the IR's canonical JSON.
    """

    ir: WorkflowIR
    hash: str

    @property
    def ref(self) -> str:
        """``name@version``."""
        return f"{self.ir.name}@{self.ir.version}"


def compile_definition(text: str, file: str = "<string>") -> Definition:
    """Compile workflow YAML into a checked :class:`Definition`.

    Args:
        text: The YAML text.
        file: The name to use in error messages.

    Raises:
        DefinitionError: Listing every problem found, each with its line.
    """
    try:
        document = load_yaml(text, file)
    except YamlSourceError as error:
        raise DefinitionError(
            [Problem(file, error.line, format_path(error.path), error.reason)]
        ) from None
    if not isinstance(document.data, dict):
        raise DefinitionError([Problem(file, 1, "", "a workflow file must be a mapping of keys")])
    try:
        source = SourceWorkflow.model_validate(document.data)
    except ValidationError as error:
        raise DefinitionError(_structure_problems(error, document)) from None
    builder = _Builder(source)
    ir = builder.build()
    findings = builder.findings
    if ir is not None and not findings:
        findings = check_workflow(ir)
    if findings:
        raise DefinitionError(
            [
                Problem(file, document.line_of(path), format_path(path), message)
                for path, message in findings
            ]
        )
    assert ir is not None  # a failed build always leaves findings
    return Definition(ir=ir, hash=ir.definition_hash())


def definition_from_ir(data: str | bytes | dict[str, Any], file: str = "<ir>") -> Definition:
    """Check an IR given as JSON (text or parsed) and return its :class:`Definition`.

    Raises:
        DefinitionError: The JSON is not a valid IR, or fails the checks of meaning.
    """
    try:
        if isinstance(data, dict):
            ir = WorkflowIR.model_validate(data)
        else:
            ir = WorkflowIR.model_validate_json(data)
    except ValidationError as error:
        raise DefinitionError(
            [
                Problem(file, None, format_path(tuple(item["loc"])), _message(item))
                for item in error.errors()
            ]
        ) from None
    findings = check_workflow(ir)
    if findings:
        raise DefinitionError(
            [Problem(file, None, format_path(path), message) for path, message in findings]
        )
    return Definition(ir=ir, hash=ir.definition_hash())


# -- structure -------------------------------------------------------------


def _structure_problems(error: ValidationError, document: SourceDocument) -> list[Problem]:
    problems = []
    for item in error.errors():
        path: Path = tuple(item["loc"])
        if item["type"] == "missing":
            message = f"missing required key {path[-1]!r}"
            line = document.line_of(path[:-1])
        elif item["type"] == "extra_forbidden":
            known = _keys_of(_model_at(SourceWorkflow, path[:-1]))
            message = f"unknown key {path[-1]!r}{did_you_mean(str(path[-1]), known)}"
            line = document.line_of(path)
        else:
            message = _message(item)
            line = document.line_of(path)
        problems.append(Problem(document.name, line, format_path(path), message))
    return problems


def _message(item: Any) -> str:
    message = str(item["msg"])
    for prefix in ("Value error, ", "Assertion failed, "):
        message = message.removeprefix(prefix)
    return message[:1].lower() + message[1:]


def _model_at(model: Any, path: Path) -> type[BaseModel] | None:
    """The source model that validates the mapping at ``path``, if any."""
    current = model
    for part in path:
        current = _unwrap(current)
        if isinstance(current, type) and issubclass(current, BaseModel):
            field = next(
                (f for name, f in current.model_fields.items() if (f.alias or name) == part), None
            )
            if field is None:
                return None
            current = field.annotation
        elif typing.get_origin(current) in (list, dict):
            current = typing.get_args(current)[-1]
        else:
            return None
    current = _unwrap(current)
    return current if isinstance(current, type) and issubclass(current, BaseModel) else None


def _unwrap(annotation: Any) -> Any:
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        options = [a for a in typing.get_args(annotation) if a is not type(None)]
        return options[0] if len(options) == 1 else annotation
    return annotation


def _keys_of(model: type[BaseModel] | None) -> list[str]:
    if model is None:
        return []
    return [field.alias or name for name, field in model.model_fields.items()]


# -- building the IR -------------------------------------------------------


class _Builder:
    """Turns a structurally valid source into the IR, collecting problems."""

    def __init__(self, source: SourceWorkflow) -> None:
        self.source = source
        self.defaults = source.defaults or SourceDefaults()
        self.findings: list[Finding] = []

    def problem(self, path: Path, message: str) -> None:
        self.findings.append((path, message))

    def build(self) -> WorkflowIR | None:
        source = self.source
        if source.orbit != LANGUAGE_VERSION:
            self.problem(
                ("orbit",),
                f"unsupported language version {source.orbit}; this Orbit reads orbit: 1",
            )
        if not WORKFLOW_NAME.fullmatch(source.workflow):
            self.problem(
                ("workflow",),
                f"{source.workflow!r} is not a workflow name: use lowercase letters, digits, - _ . "
                "(at most 100, starting with a letter or digit)",
            )
        if not SEMVER.fullmatch(source.version):
            self.problem(
                ("version",), f"{source.version!r} is not a semantic version such as 1.0.0"
            )
        self.schema(source.input, ("input",))
        self.schema(source.output_schema, ("output_schema",))
        signals = dict(source.signals or {})
        for name, schema in signals.items():
            self.name(name, ("signals", name), "signal")
            self.schema(schema, ("signals", name))
        queries = {}
        for name, query in (source.queries or {}).items():
            self.name(name, ("queries", name), "query")
            queries[name] = self.expression_only(query, ("queries", name))
        tasks = {name: self.task(name, ("tasks", name)) for name in source.tasks or {}}
        steps = [
            self.step(step, ("steps", index), source.steps, False)
            for index, step in enumerate(source.steps)
        ]
        final = source.finally_ or []
        finally_steps = [
            self.step(step, ("finally", index), final, True) for index, step in enumerate(final)
        ]
        if "output" in source.model_fields_set:
            output = self.template(source.output)
        else:
            output = _step_output_expression(source.steps[-1].id)
        if self.findings:
            return None
        return WorkflowIR(
            name=source.workflow,
            version=source.version,
            description=source.description,
            timeout_ms=source.timeout,
            input_schema=source.input,
            output_schema=source.output_schema,
            signals=signals,
            queries=queries,
            tasks=tasks,
            steps=tuple(step for step in steps if step is not None),
            finally_steps=tuple(step for step in finally_steps if isinstance(step, CallStep)),
            output=output,
        )

    # -- pieces ------------------------------------------------------------

    def name(self, name: str, path: Path, what: str) -> None:
        if not IDENTIFIER.fullmatch(name):
            self.problem(
                path,
                f"{name!r} is not a valid {what} name: "
                "start with a letter, then letters, digits, - or _",
            )

    def schema(self, schema: Any, path: Path) -> None:
        if schema is None:
            return
        try:
            check_schema(schema)
        except SchemaProblem as problem:
            self.problem(
                (*path, *problem.path), f"not a valid JSON Schema (2020-12): {problem.reason}"
            )

    def template(self, value: Any) -> Any:
        """A template with every expression spelled canonically."""
        source = expression_source(value)
        if source is not None:
            return canonical_expression(source)
        if isinstance(value, dict):
            return {key: self.template(item) for key, item in value.items()}
        if isinstance(value, list):
            return [self.template(item) for item in value]
        return value

    def expression_only(self, value: str, path: Path) -> str:
        source = expression_source(value)
        if source is None:
            self.problem(path, "must be an expression written ${ … }")
            return value
        return canonical_expression(source)

    def task(self, name: str, path: Path) -> TaskContract:
        contract = (self.source.tasks or {})[name]
        if not TASK_NAME.fullmatch(name):
            self.problem(
                path, f"{name!r} is not a valid task name: letters, digits, - _ . (at most 100)"
            )
        elif name.startswith(RESERVED_TASK_PREFIX):
            self.problem(
                path, f"task names starting with {RESERVED_TASK_PREFIX!r} are reserved for Orbit"
            )
        if not CONTRACT_VERSION.fullmatch(contract.version):
            self.problem(
                (*path, "version"), f"{contract.version!r} is not a valid contract version"
            )
        self.schema(contract.input, (*path, "input"))
        self.schema(contract.output, (*path, "output"))
        return TaskContract(
            version=contract.version, input_schema=contract.input, output_schema=contract.output
        )

    def step(
        self, step: SourceStep, path: Path, siblings: list[SourceStep], in_finally: bool
    ) -> CallStep | AwaitStep | SleepStep | None:
        if not IDENTIFIER.fullmatch(step.id):
            self.problem(
                (*path, "id"),
                f"{step.id!r} is not a valid step id: "
                "start with a letter, then letters, digits, - or _ "
                "(at most 100)",
            )
        kinds = [kind for kind in STEP_KINDS if _written(step, kind)]
        if len(kinds) != 1:
            given = " and ".join(kinds) if kinds else "none"
            self.problem(
                path, f"a step needs exactly one of {', '.join(STEP_KINDS)} (this one has {given})"
            )
            return None
        kind = kinds[0]
        allowed = _ALLOWED_FIELDS[kind] - (_NOT_IN_FINALLY if in_finally else frozenset())
        if in_finally and kind not in ("task", "http"):
            self.problem(path, f"finally steps run tasks or http requests, not {kind}")
            return None
        for field in sorted(step.model_fields_set - allowed - _COMMON_FIELDS):
            key = _alias(field)
            where = (
                "in finally" if in_finally else f"on {'an' if kind == 'await' else 'a'} {kind} step"
            )
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
        if call is None:
            return None
        for_each = self.fan_out(step, path)
        concurrency = step.concurrency
        if concurrency is not None and for_each is None:
            self.problem(
                (*path, "concurrency"), "caps the units of a for step; this step has no for"
            )
            concurrency = None
        elif concurrency is not None and concurrency < 1:
            self.problem((*path, "concurrency"), "must be at least 1")
            concurrency = None
        return CallStep(
            kind=typing.cast(CallKind, kind),
            call=call,
            child=child,
            for_each=for_each,
            concurrency=concurrency,
            compensate=self.compensation(step.compensate, (*path, "compensate")),
            **common,
        )

    def condition(self, step: SourceStep, path: Path) -> Any:
        if "if_" not in step.model_fields_set:
            return None
        if isinstance(step.if_, bool):
            return step.if_
        if expression_source(step.if_) is None:
            self.problem((*path, "if"), "must be true, false or an expression ${ … }")
        return self.template(step.if_)

    def fan_out(self, step: SourceStep, path: Path) -> Any:
        if "for_" not in step.model_fields_set:
            return None
        if not isinstance(step.for_, list) and expression_source(step.for_) is None:
            self.problem((*path, "for"), "must be a list or an expression ${ … }")
        return self.template(step.for_)

    def call(
        self, step: SourceStep, kind: str, path: Path
    ) -> tuple[TaskCall | None, ChildRef | None]:
        if kind == "workflow":
            assert step.workflow is not None
            child = self.child(step.workflow, (*path, "workflow"))
            if child is None:
                return None, None
            retry = self.retry(step.retry, None, (*path, "retry"), default_attempts=1)
            timeouts = Timeouts(attempt_ms=step.timeout)
            return TaskCall(
                task=WORKFLOW_TASK_PREFIX + child.name,
                input=self.template(step.input),
                retry=retry,
                timeouts=timeouts,
            ), child
        if kind == "http":
            assert step.http is not None
            request_input = self.http_request(step.http, (*path, "http"))
            return self.task_call(HTTP_TASK, request_input, step, path), None
        assert step.task is not None
        return self.task_call(step.task, self.template(step.input), step, path), None

    def task_call(
        self, task: str, input_template: Any, policy: SourceStep | SourceCompensate, path: Path
    ) -> TaskCall:
        defaults = self.defaults
        return TaskCall(
            task=task,
            input=input_template,
            retry=self.retry(policy.retry, defaults.retry, (*path, "retry")),
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
    ) -> RetryPolicy:
        """The step's retry fields over the defaults' fields, over Orbit's defaults."""
        own = own or SourceRetry()
        inherited = inherited or SourceRetry()
        max_attempts = _first(own.max_attempts, inherited.max_attempts, default_attempts)
        initial = _first(own.initial_interval, inherited.initial_interval, 1000)
        backoff = _first(own.backoff, inherited.backoff, 2.0)
        maximum = _first(own.max_interval, inherited.max_interval, 100 * initial)
        codes = _first(own.non_retryable, inherited.non_retryable, [])
        problems = [
            ((*path, "max_attempts"), "must be at least 1 (1 means no retry)", max_attempts < 1),
            ((*path, "backoff"), "must be at least 1.0", backoff < 1.0),
            (
                (*path, "max_interval"),
                "must not be shorter than initial_interval",
                maximum < initial,
            ),
            ((*path, "non_retryable"), "error codes must not be empty", any(not c for c in codes)),
        ]
        if any(failed for _, _, failed in problems):
            for where, message, failed in problems:
                if failed:
                    self.problem(where, message)
            return RetryPolicy()
        return RetryPolicy(
            max_attempts=max_attempts,
            initial_interval_ms=initial,
            backoff=backoff,
            max_interval_ms=maximum,
            non_retryable=tuple(sorted(set(codes))),
        )

    def compensation(self, compensate: SourceCompensate | None, path: Path) -> Compensation | None:
        if compensate is None:
            return None
        return Compensation(
            call=self.task_call(compensate.task, self.template(compensate.input), compensate, path)
        )

    def child(self, reference: str, path: Path) -> ChildRef | None:
        name, at, version = reference.partition("@")
        if not at or not WORKFLOW_NAME.fullmatch(name) or not SEMVER.fullmatch(version):
            self.problem(path, f"{reference!r} is not a child reference such as send-invoice@1.0.0")
            return None
        return ChildRef(name=name, version=version)

    def http_request(self, http: SourceHttp, path: Path) -> dict[str, Any]:
        method = http.method.upper()
        if method not in HTTP_METHODS:
            self.problem(
                (*path, "method"), f"{http.method!r} is not one of {', '.join(HTTP_METHODS)}"
            )
        url = http.url
        if expression_source(url) is None and not url.startswith(("http://", "https://")):
            self.problem(
                (*path, "url"), "must start with http:// or https:// (or be an expression ${ … })"
            )
        request: dict[str, Any] = {"method": method, "url": self.template(url)}
        if http.headers is not None:
            request["headers"] = self.template(http.headers)
        if "body" in http.model_fields_set:
            request["body"] = self.template(http.body)
        if http.timeout is not None:
            request["timeout_ms"] = http.timeout
        return request


_COMMON_FIELDS = frozenset({"id", "after", "if_", "continue_on_error"})
_ALLOWED_FIELDS = {
    "task": frozenset(
        {
            "task",
            "input",
            "for_",
            "concurrency",
            "retry",
            "timeout",
            "schedule_timeout",
            "heartbeat_timeout",
            "compensate",
        }
    ),
    "http": frozenset(
        {"http", "retry", "timeout", "schedule_timeout", "heartbeat_timeout", "compensate"}
    ),
    "workflow": frozenset(
        {"workflow", "input", "for_", "concurrency", "retry", "timeout", "compensate"}
    ),
    "await": frozenset({"await_", "timeout"}),
    "sleep": frozenset({"sleep"}),
}
_NOT_IN_FINALLY = frozenset({"for_", "concurrency", "compensate"})


def _written(step: SourceStep, kind: str) -> bool:
    return {"await": "await_"}.get(kind, kind) in step.model_fields_set


def _alias(field: str) -> str:
    info = SourceStep.model_fields[field]
    return info.alias or field


def _first(*values: Any) -> Any:
    return next((value for value in values if value is not None), None)


def _step_output_expression(step_id: str) -> str:
    """``${ steps.ID.output }``, indexing by string when the id is no CEL identifier."""
    if re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", step_id):
        return canonical_expression(f"steps.{step_id}.output")
    return canonical_expression(f'steps["{step_id}"].output')
