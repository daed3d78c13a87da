"""The compiled form of a workflow: frozen models, canonical JSON, a content hash.

The IR is what the engine runs and what the registry stores. It is explicit:
defaults are already applied, durations are milliseconds, every step names
its dependencies, and every expression is spelled ``${ source }``. Two
definitions that mean the same thing compile to the same IR, so the SHA-256
of its canonical JSON identifies the definition.

Templates (step inputs, request bodies, the output) are JSON values in which
a string that is exactly ``${ … }`` is an expression, as in the YAML.
"""

from __future__ import annotations

import functools
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, JsonValue, model_validator

from orbit_model.canonical import canonical_json, sha256_of

#: The built-in task that performs ``http:`` steps.
HTTP_TASK = "orbit.http.request"
#: The contract version of the built-in HTTP task (its queue is ``NS.task.orbit.http.request@1``).
HTTP_CONTRACT_VERSION = "1"
#: Prefix of the contract name under which a child workflow is dispatched.
WORKFLOW_TASK_PREFIX = "workflow:"


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class RetryPolicy(_Frozen):
    """When and how often a failed attempt is tried again."""

    max_attempts: int = Field(3, ge=1)
    """Attempts in all, the first included; 1 means no retry."""
    initial_interval_ms: int = Field(1000, ge=1)
    """Delay before the second attempt."""
    backoff: float = Field(2.0, ge=1.0)
    """Factor by which each further delay grows."""
    max_interval_ms: int = Field(100_000, ge=1)
    """Cap on any one delay."""
    non_retryable: tuple[str, ...] = ()
    """Error codes that fail the step at once, sorted."""

    @model_validator(mode="after")
    def _cap_not_below_start(self) -> RetryPolicy:
        if self.max_interval_ms < self.initial_interval_ms:
            raise ValueError("max_interval_ms must not be shorter than initial_interval_ms")
        return self

    def delay_ms(self, failed_attempt: int) -> int:
        """The delay after attempt number ``failed_attempt`` (1-based) failed."""
        delay = self.initial_interval_ms * self.backoff ** (failed_attempt - 1)
        return int(min(delay, self.max_interval_ms))


class Timeouts(_Frozen):
    """Deadlines of one attempt; None means unbounded."""

    attempt_ms: int | None = Field(None, ge=1)
    """From dispatch to result (the step's ``timeout``)."""
    schedule_ms: int | None = Field(None, ge=1)
    """Time in the queue before a worker takes it (``schedule_timeout``)."""
    heartbeat_ms: int | None = Field(None, ge=1)
    """Longest gap between heartbeats of a running attempt (``heartbeat_timeout``)."""


class TaskCall(_Frozen):
    """Something dispatched to a task queue: the contract, its input and its policies."""

    task: str
    """Contract name: a declared task, ``orbit.http.request`` or ``workflow:NAME``."""
    input: JsonValue = None
    """Template of the input sent to the worker."""
    retry: RetryPolicy = RetryPolicy()
    timeouts: Timeouts = Timeouts()


class ChildRef(_Frozen):
    """A child workflow, pinned by name and version (and hash, once registered)."""

    name: str
    version: str
    hash: str | None = None
    """Filled in at registration; not part of the parent's definition hash,
    because ``(name, version)`` already names one immutable definition."""


class Compensation(_Frozen):
    """The task that undoes a succeeded step when the execution fails or is cancelled."""

    call: TaskCall


class _StepBase(_Frozen):
    id: str
    after: tuple[str, ...] = ()
    """The steps that must be done first."""
    explicit_after: bool = False
    """Whether ``after`` was written: a step skipped only because its
    dependencies were skipped still runs when it names them explicitly."""
    when: JsonValue = None
    """The ``if`` condition (a boolean or an expression); None runs always."""
    continue_on_error: bool = False


class CallStep(_StepBase):
    """A ``task``, ``http`` or ``workflow`` step: one dispatched call per unit."""

    kind: Literal["task", "http", "workflow"]
    call: TaskCall
    for_each: JsonValue = None
    """The ``for`` list (a list or an expression); None is a single unit."""
    concurrency: int | None = Field(None, ge=1)
    """Cap on units in flight of a ``for`` step."""
    child: ChildRef | None = None
    """For ``workflow`` steps: the child definition."""
    compensate: Compensation | None = None

    @model_validator(mode="after")
    def _call_matches_kind(self) -> CallStep:
        if (self.kind == "workflow") != (self.child is not None):
            raise ValueError("a child reference belongs to workflow steps, and they need one")
        if self.child is not None and self.call.task != WORKFLOW_TASK_PREFIX + self.child.name:
            raise ValueError(f"a workflow step calls {WORKFLOW_TASK_PREFIX}{self.child.name}")
        if (self.kind == "http") != (self.call.task == HTTP_TASK):
            raise ValueError(f"http steps, and only they, call {HTTP_TASK}")
        return self


class AwaitStep(_StepBase):
    """Waits for a signal; its payload is the step output."""

    kind: Literal["await"]
    signal: str
    timeout_ms: int | None = Field(None, ge=1)


class SleepStep(_StepBase):
    """A durable timer."""

    kind: Literal["sleep"]
    duration_ms: int = Field(ge=1)


Step = Annotated[CallStep | AwaitStep | SleepStep, Field(discriminator="kind")]


class TaskContract(_Frozen):
    """What a workflow expects of a task: its version and JSON Schemas."""

    version: str
    input_schema: JsonValue = None
    output_schema: JsonValue = None


class WorkflowIR(_Frozen):
    """A compiled workflow definition."""

    ir_version: Literal[1] = 1
    """Version of the IR format; a change of format that alters meaning bumps it."""
    name: str
    version: str
    description: str | None = None
    timeout_ms: int | None = Field(None, ge=1)
    input_schema: JsonValue = None
    output_schema: JsonValue = None
    signals: dict[str, JsonValue] = Field(default_factory=dict)
    """Signal name to the JSON Schema of its payload (None: any payload)."""
    queries: dict[str, str] = Field(default_factory=dict)
    """Query name to its expression."""
    tasks: dict[str, TaskContract] = Field(default_factory=dict)
    steps: tuple[Step, ...]
    finally_steps: tuple[CallStep, ...] = ()
    output: JsonValue = None
    """Template of the execution's output."""

    def step(self, step_id: str) -> CallStep | AwaitStep | SleepStep:
        """The main or ``finally`` step with this id (the main one, if both have it).

        Raises:
            KeyError: There is none.
        """
        (steps, final), by_id = self._steps_by_id
        if steps is not self.steps or final is not self.finally_steps:
            # model_copy copies the index with the rest: it is of the steps copied from.
            del self.__dict__["_steps_by_id"]
            by_id = self._steps_by_id[1]
        return by_id[step_id]

    @functools.cached_property
    def _steps_by_id(
        self,
    ) -> tuple[tuple[tuple[Step, ...], tuple[CallStep, ...]], dict[str, Step]]:
        """Each step by its id, and the step lists it was made of.

        Each turn of a run looks up the dependencies of each step still waiting:
        a search of the list each time took 58 ms a turn at a thousand steps.
        """
        by_id: dict[str, Step] = {}
        for step in (*self.steps, *self.finally_steps):
            by_id.setdefault(step.id, step)
        return (self.steps, self.finally_steps), by_id

    def to_json_data(self) -> dict[str, Any]:
        """The IR as plain JSON data (None fields left out)."""
        return self.model_dump(mode="json", exclude_none=True)

    def canonical_json(self) -> str:
        """The IR's canonical JSON text."""
        return canonical_json(self.to_json_data())

    def definition_hash(self) -> str:
        """``sha256:`` + hex SHA-256 of the canonical JSON, child hashes left out."""
        data = self.to_json_data()
        for step in (*data["steps"], *data.get("finally_steps", ())):
            child = step.get("child")
            if child is not None:
                child.pop("hash", None)
        return sha256_of(canonical_json(data))
