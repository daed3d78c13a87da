"""Checks of meaning on a compiled workflow: names, references, cycles, expressions.

They run on the IR, so a definition submitted as compiled JSON is checked
exactly like one compiled from YAML. Each problem names the place in the
terms of the YAML (``steps[2].if``), so the compiler can point at its line.
"""

from __future__ import annotations

from collections.abc import Generator, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeAlias

from orbit_model import names
from orbit_model.contracts import SchemaProblem, check_schema
from orbit_model.expressions import (
    EXECUTION_FIELDS,
    STEP_FIELDS,
    ExpressionSyntaxError,
    References,
    compile_expression,
    expression_source,
)
from orbit_model.ir import CallStep, Step, WorkflowIR
from orbit_model.problems import did_you_mean
from orbit_model.yaml_source import Path

Finding = tuple[Path, str]


def check_workflow(ir: WorkflowIR) -> Iterator[Finding]:
    """Every problem of meaning in ``ir``, as ``(path, message)`` pairs, as found.

    Lazily: a caller that lists only the first few problems pays only for those
    (a suggestion among a thousand step ids is not cheap).
    """
    yield from _check_names(ir)
    yield from _check_schemas(ir)
    yield from _check_queries(ir)
    duplicates = list(_check_ids(ir))
    if duplicates:
        yield from duplicates  # with two steps of one id, `after` means nothing
        return
    ids = _StepIds(ir)
    main = yield from _dependency_order(ir.steps, "steps", frozenset())
    final = yield from _dependency_order(ir.finally_steps, "finally", ids.main)
    if main is None or final is None:
        return  # scopes depend on the order; a cycle makes them meaningless
    for index, step in enumerate(ir.steps):
        yield from _check_step(ir, step, ("steps", index), _Scope(ir, ids, main.before(index)))
    for index, step in enumerate(ir.finally_steps):
        scope = _Scope(ir, ids, final.before(index, also=ids.main), in_finally=True)
        yield from _check_step(ir, step, ("finally", index), scope)
    every_main_step = _Scope(ir, ids, _Visible(ids.main))
    for name, query in ir.queries.items():
        yield from every_main_step.check(query, ("queries", name))
    yield from every_main_step.check(ir.output, ("output",))


# -- names, schemas, queries -----------------------------------------------


def _check_names(ir: WorkflowIR) -> Iterator[Finding]:
    if not names.WORKFLOW_NAME.fullmatch(ir.name):
        yield ("workflow",), f"{ir.name!r} is not a workflow name: use {names.WORKFLOW_NAME_RULE}"
    if not names.SEMVER.fullmatch(ir.version):
        yield ("version",), f"{ir.version!r} is not a semantic version such as 1.0.0"
    for key, what, mapping in (("signals", "signal", ir.signals), ("queries", "query", ir.queries)):
        for name in mapping:
            if not names.IDENTIFIER.fullmatch(name):
                yield (
                    (key, name),
                    f"{name!r} is not a valid {what} name: use {names.IDENTIFIER_RULE}",
                )
    for name, contract in ir.tasks.items():
        if not names.TASK_NAME.fullmatch(name):
            yield ("tasks", name), f"{name!r} is not a valid task name: use {names.TASK_NAME_RULE}"
        elif name.startswith(names.RESERVED_TASK_PREFIX):
            yield (
                ("tasks", name),
                f"task names starting with {names.RESERVED_TASK_PREFIX!r} are reserved for Orbit",
            )
        if not names.CONTRACT_VERSION.fullmatch(contract.version):
            yield (
                ("tasks", name, "version"),
                f"{contract.version!r} is not a valid contract version",
            )
    for key, steps in (("steps", ir.steps), ("finally", ir.finally_steps)):
        for index, step in enumerate(steps):
            if not names.IDENTIFIER.fullmatch(step.id):
                yield (
                    (key, index, "id"),
                    f"{step.id!r} is not a valid step id: use {names.IDENTIFIER_RULE}",
                )


def _check_schemas(ir: WorkflowIR) -> Iterator[Finding]:
    schemas: list[tuple[Path, Any]] = [
        (("input",), ir.input_schema),
        (("output_schema",), ir.output_schema),
    ]
    schemas += [(("signals", name), schema) for name, schema in ir.signals.items()]
    for name, contract in ir.tasks.items():
        schemas.append((("tasks", name, "input"), contract.input_schema))
        schemas.append((("tasks", name, "output"), contract.output_schema))
    for path, schema in schemas:
        if schema is None:
            continue
        try:
            check_schema(schema)
        except SchemaProblem as problem:
            yield (*path, *problem.path), f"not a valid JSON Schema (2020-12): {problem.reason}"


def _check_queries(ir: WorkflowIR) -> Iterator[Finding]:
    for name, query in ir.queries.items():
        if expression_source(query) is None:
            yield ("queries", name), "must be an expression written ${ … }"


# -- step ids and dependencies ---------------------------------------------


def _check_ids(ir: WorkflowIR) -> Iterator[Finding]:
    seen: dict[str, str] = {}
    for key, steps in (("steps", ir.steps), ("finally", ir.finally_steps)):
        for index, step in enumerate(steps):
            if step.id in seen:
                yield (
                    (key, index, "id"),
                    f"duplicate step id {step.id!r} (first at {seen[step.id]})",
                )
            else:
                seen[step.id] = f"{key}[{index}]"


@dataclass(frozen=True)
class _Visible:
    """The steps sure to be done (or skipped) before a place runs: those of ``always``,
    and those of ``index_of`` whose bit is set in ``before``."""

    always: frozenset[str]
    index_of: Mapping[str, int] = field(default_factory=dict)
    before: int = 0

    def __contains__(self, step_id: str) -> bool:
        if step_id in self.always:
            return True
        index = self.index_of.get(step_id)
        return index is not None and (self.before >> index) & 1 == 1


@dataclass(frozen=True)
class _Order:
    """Which steps of one list run before which."""

    index_of: Mapping[str, int]
    ancestors: list[int]
    """Of each step, its ancestors through ``after`` as a bitset: bit ``i`` is the
    ``i``-th step. A set of ids per step would grow with the square of the steps
    (a chain of 8,000 took 1.3 GB); these take 125 KB at the limit of steps."""

    def before(self, index: int, also: frozenset[str] = frozenset()) -> _Visible:
        return _Visible(also, self.index_of, self.ancestors[index])


def _dependency_order(
    steps: tuple[Step, ...], key: str, before: frozenset[str]
) -> Generator[Finding, None, _Order | None]:
    """Yields what is wrong with each ``after``; returns the order, or None on a cycle.

    ``before`` are steps that all of these run after anyway (the main steps,
    for ``finally``), which their ``after`` therefore cannot name.
    """
    index_of = {step.id: index for index, step in enumerate(steps)}
    for index, step in enumerate(steps):
        for position, dependency in enumerate(step.after):
            path: Path = (key, index, "after", position)
            if dependency == step.id:
                yield path, f"step {step.id!r} cannot run after itself"
            elif dependency in before:
                yield path, "finally steps run after every main step; name only finally steps here"
            elif dependency not in index_of:
                where = "in finally" if key == "finally" else "among the steps"
                suggestion = did_you_mean(dependency, index_of)
                yield path, f"undeclared step {dependency!r} {where}{suggestion}"
    graph = [
        [index_of[d] for d in dict.fromkeys(s.after) if d in index_of and d != s.id] for s in steps
    ]
    ancestors, stuck = _ancestors(graph)
    if stuck:
        cycle = [steps[node].id for node in _a_cycle(graph, stuck)]
        yield (key, index_of[cycle[0]], "after"), "dependency cycle: " + " -> ".join(cycle)
        return None
    return _Order(index_of, ancestors)


def _ancestors(graph: list[list[int]]) -> tuple[list[int], set[int]]:
    """Each node's ancestors as a bitset, and the nodes on or behind a cycle.

    Kahn's algorithm, so no recursion: a node is resolved once all its
    dependencies are; those never resolved wait on a cycle.
    """
    waiting = [len(dependencies) for dependencies in graph]
    dependents: list[list[int]] = [[] for _ in graph]
    for node, dependencies in enumerate(graph):
        for dependency in dependencies:
            dependents[dependency].append(node)
    ready = [node for node, count in enumerate(waiting) if count == 0]
    ancestors = [0] * len(graph)
    while ready:
        node = ready.pop()
        found = 0
        for dependency in graph[node]:
            found |= ancestors[dependency] | 1 << dependency
        ancestors[node] = found
        for dependent in dependents[node]:
            waiting[dependent] -= 1
            if waiting[dependent] == 0:
                ready.append(dependent)
    return ancestors, {node for node, count in enumerate(waiting) if count}


def _a_cycle(graph: list[list[int]], stuck: set[int]) -> list[int]:
    """One cycle ``[a, b, …, a]`` among ``stuck``, from its first node, following ``after``."""
    # A stuck node waits on a stuck dependency, so following those must revisit a node.
    walk = [min(stuck)]
    position = {walk[0]: 0}
    while True:
        following = next(d for d in graph[walk[-1]] if d in stuck)
        if following in position:
            return [*walk[position[following] :], following]
        position[following] = len(walk)
        walk.append(following)


# -- steps -----------------------------------------------------------------


def _check_step(ir: WorkflowIR, step: Step, path: Path, scope: _Scope) -> Iterator[Finding]:
    yield from scope.check(step.when, (*path, "if"))
    if step.kind == "await" and step.signal not in ir.signals:
        yield (
            (*path, "await"),
            f"undeclared signal {step.signal!r}{did_you_mean(step.signal, ir.signals)}",
        )
    if not isinstance(step, CallStep):
        return
    yield from scope.check(step.for_each, (*path, "for"))
    # Only the input is evaluated per unit and per attempt.
    call_scope = scope.inside_call(fan_out=step.for_each is not None)
    if step.kind == "http":
        yield from _check_http(step, (*path, "http"))
        yield from call_scope.check(step.call.input, (*path, "http"))
    else:
        yield from call_scope.check(step.call.input, (*path, "input"))
    if step.kind == "task":
        yield from _check_task(ir, step.call.task, (*path, "task"))
    if step.compensate is not None:
        compensate_path = (*path, "compensate")
        yield from _check_task(ir, step.compensate.call.task, (*compensate_path, "task"))
        # A compensation runs after the execution failed: any main step may
        # have succeeded by then, this one included; no fan-out unit is bound.
        every_step = _Scope(ir, scope.ids, _Visible(scope.ids.main), attempt=True)
        yield from every_step.check(step.compensate.call.input, (*compensate_path, "input"))


def _check_task(ir: WorkflowIR, task: str, path: Path) -> Iterator[Finding]:
    if task.startswith(names.RESERVED_TASK_PREFIX):
        yield path, f"{task!r} is reserved for Orbit: a task step or compensation cannot call it"
    elif task not in ir.tasks:
        yield (
            path,
            f"undeclared task {task!r}{did_you_mean(task, ir.tasks)}; declare it under tasks",
        )


def _check_http(step: CallStep, path: Path) -> Iterator[Finding]:
    request = step.call.input
    if not isinstance(request, dict):
        yield path, "the request must be a mapping of method, url, headers, body, timeout"
        return
    method = request.get("method")
    if method not in names.HTTP_METHODS:
        yield (*path, "method"), f"{method!r} is not one of {', '.join(names.HTTP_METHODS)}"
    url = request.get("url")
    if not isinstance(url, str) or (
        expression_source(url) is None and not url.startswith(("http://", "https://"))
    ):
        yield (*path, "url"), "must start with http:// or https:// (or be an expression ${ … })"


# -- expressions -----------------------------------------------------------


class _StepIds:
    """The step ids of a workflow, gathered once for all its expressions."""

    def __init__(self, ir: WorkflowIR) -> None:
        self.main = frozenset(step.id for step in ir.steps)
        self.final = frozenset(step.id for step in ir.finally_steps)
        self.every = self.main | self.final


@dataclass(frozen=True)
class _Scope:
    """What expressions at one place may read."""

    ir: WorkflowIR
    ids: _StepIds
    visible: _Visible
    """Steps sure to be done (or skipped) before this place runs."""
    in_finally: bool = False
    item: bool = False
    """Whether ``item`` and ``index`` are bound (inside a ``for`` unit)."""
    attempt: bool = False
    """Whether ``execution.attempt`` is known (inside a dispatched call)."""

    def inside_call(self, fan_out: bool) -> _Scope:
        return _Scope(self.ir, self.ids, self.visible, self.in_finally, fan_out, attempt=True)

    def check(self, template: Any, path: Path) -> Iterator[Finding]:
        for link, source in _expressions(template):
            try:
                expression = compile_expression(source)
            except ExpressionSyntaxError as error:
                hint = ""
                if "${" in source:
                    hint = "; a string holds one whole expression: join values inside it (a + b)"
                yield (*path, *_path_of(link)), f"invalid expression: {error}{hint}"
                continue
            # One report per message, though a step is read twice; lazily, since
            # one expression may name thousands of undeclared steps.
            reported: set[str] = set()
            for message in self._messages(expression.references):
                if message not in reported:
                    reported.add(message)
                    yield (*path, *_path_of(link)), message

    def _messages(self, references: References) -> Iterator[str]:
        for name in sorted(references.unknown):
            yield f"undeclared variable {name!r}{did_you_mean(name, self._roots())}"
        if not self.item:
            for name in sorted(references.roots & {"item", "index"}):
                yield f"{name!r} is only bound inside the input of a step with for"
        for access in references.accesses:
            if access.root == "steps":
                yield from self._step_messages(access.member, access.field)
            elif access.root == "signals" and access.member not in self.ir.signals:
                yield (
                    f"undeclared signal {access.member!r}"
                    f"{did_you_mean(access.member, self.ir.signals)}"
                )
            elif access.root == "execution":
                if access.member not in EXECUTION_FIELDS:
                    yield (
                        f"execution has no field {access.member!r}"
                        f"{did_you_mean(access.member, EXECUTION_FIELDS)}"
                    )
                elif access.member == "attempt" and not self.attempt:
                    yield "execution.attempt is only known in the input of a dispatched call"

    def _step_messages(self, step_id: str, field: str | None) -> Iterator[str]:
        every, final = self.ids.every, self.ids.final
        if step_id not in every:
            hyphenated = sorted(i for i in every if i.startswith(step_id + "-"))
            if hyphenated:
                yield (
                    f"undeclared step {step_id!r}; CEL reads '-' as minus, so write "
                    f'steps["{hyphenated[0]}"] for the step {hyphenated[0]!r}'
                )
            else:
                yield f"undeclared step {step_id!r}{did_you_mean(step_id, every)}"
        elif step_id in final and not self.in_finally:
            yield f"step {step_id!r} is a finally step, which runs last: it cannot be read here"
        elif step_id not in self.visible:
            yield f"step {step_id!r} does not run before this; add it to after to read it here"
        if field is not None and field not in STEP_FIELDS:
            yield (
                f"steps.{step_id} has no field {field!r}; it has output and status"
                f"{did_you_mean(field, STEP_FIELDS)}"
            )

    def _roots(self) -> set[str]:
        roots = {"input", "steps", "signals", "execution"}
        return roots | {"item", "index"} if self.item else roots


_Link: TypeAlias = "tuple[_Link, str | int] | None"
"""A place in a template: its parent's place and its key or index (None: the top)."""


def _expressions(template: Any) -> Iterator[tuple[_Link, str]]:
    """Every expression in a template, in order, with its place in the template.

    Walked with a stack of its own and places linked to their parents: nested
    generators pay for an expression once per level above it, and a path per
    value copies its parent's (a 190-deep template of 20,000 expressions took 4 s).
    """
    stack: list[tuple[_Link, Any]] = [(None, template)]
    while stack:
        link, value = stack.pop()
        source = expression_source(value)
        if source is not None:
            yield link, source
        elif isinstance(value, dict):
            stack.extend(((link, key), item) for key, item in reversed(value.items()))
        elif isinstance(value, list):
            stack.extend(((link, index), item) for index, item in reversed(list(enumerate(value))))


def _path_of(link: _Link) -> Path:
    parts: list[str | int] = []
    while link is not None:
        link, part = link
        parts.append(part)
    return tuple(reversed(parts))
