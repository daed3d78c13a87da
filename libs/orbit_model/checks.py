"""Checks of meaning on a compiled workflow: references, cycles, expressions.

They run on the IR, so a definition submitted as compiled JSON is checked
exactly like one compiled from YAML. Each problem names the place in the
terms of the YAML (``steps[2].if``), so the compiler can point at its line.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from orbit_model.expressions import (
    EXECUTION_FIELDS,
    STEP_FIELDS,
    ExpressionSyntaxError,
    compile_expression,
    iter_expressions,
)
from orbit_model.ir import HTTP_TASK, CallStep, Step, WorkflowIR
from orbit_model.problems import did_you_mean
from orbit_model.yaml_source import Path

Finding = tuple[Path, str]


def check_workflow(ir: WorkflowIR) -> list[Finding]:
    """Every problem of meaning in ``ir``, as ``(path, message)`` pairs."""
    findings: list[Finding] = []
    findings += _check_ids(ir)
    main_order = _dependency_order(ir.steps, "steps", findings)
    final_order = _dependency_order(ir.finally_steps, "finally", findings)
    if main_order is None or final_order is None:
        return findings  # scopes depend on the order; a cycle makes them meaningless
    main_ids = frozenset(step.id for step in ir.steps)
    for index, step in enumerate(ir.steps):
        scope = _Scope(ir, visible=main_order[step.id], all_steps=main_ids, item=_fans_out(step))
        findings += _check_step(ir, step, ("steps", index), scope)
    for index, step in enumerate(ir.finally_steps):
        scope = _Scope(ir, visible=main_ids | final_order[step.id], all_steps=_all_ids(ir))
        findings += _check_step(ir, step, ("finally", index), scope)
    for name, query in ir.queries.items():
        findings += _Scope(ir, visible=main_ids, all_steps=main_ids).check(query, ("queries", name))
    findings += _Scope(ir, visible=main_ids, all_steps=main_ids).check(ir.output, ("output",))
    return findings


def _all_ids(ir: WorkflowIR) -> frozenset[str]:
    return frozenset(step.id for step in (*ir.steps, *ir.finally_steps))


def _fans_out(step: Step) -> bool:
    return isinstance(step, CallStep) and step.for_each is not None


def _check_ids(ir: WorkflowIR) -> list[Finding]:
    findings: list[Finding] = []
    seen: dict[str, Path] = {}
    for key, steps in (("steps", ir.steps), ("finally", ir.finally_steps)):
        for index, step in enumerate(steps):
            if step.id in seen:
                findings.append(
                    (
                        (key, index, "id"),
                        f"duplicate step id {step.id!r} (first at {_where(seen[step.id])})",
                    )
                )
            else:
                seen[step.id] = (key, index)
    return findings


def _where(path: Path) -> str:
    return f"{path[0]}[{path[1]}]"


def _dependency_order(
    steps: tuple[Step, ...], key: str, findings: list[Finding]
) -> dict[str, frozenset[str]] | None:
    """Each step's ancestors (transitively, through ``after``), or None on a cycle."""
    ids = {step.id: index for index, step in enumerate(steps)}
    for index, step in enumerate(steps):
        for position, dependency in enumerate(step.after):
            path: Path = (key, index, "after", position)
            if dependency == step.id:
                findings.append((path, f"step {step.id!r} cannot run after itself"))
            elif dependency not in ids:
                where = "in finally" if key == "finally" else "among the steps"
                findings.append(
                    (path, f"undeclared step {dependency!r} {where}{did_you_mean(dependency, ids)}")
                )
    graph = {step.id: [d for d in step.after if d in ids and d != step.id] for step in steps}
    cycle = _find_cycle(graph, [step.id for step in steps])
    if cycle is not None:
        findings.append(((key, ids[cycle[0]], "after"), "dependency cycle: " + " -> ".join(cycle)))
        return None
    ancestors: dict[str, frozenset[str]] = {}
    for step in steps:  # no cycle, so a depth-first walk terminates
        ancestors[step.id] = _ancestors(step.id, graph, ancestors)
    return ancestors


def _ancestors(
    step_id: str, graph: Mapping[str, list[str]], known: dict[str, frozenset[str]]
) -> frozenset[str]:
    if step_id not in known:
        found: set[str] = set()
        for dependency in graph[step_id]:
            found |= {dependency} | _ancestors(dependency, graph, known)
        known[step_id] = frozenset(found)
    return known[step_id]


def _find_cycle(graph: Mapping[str, list[str]], order: list[str]) -> list[str] | None:
    """A cycle as ``[a, b, …, a]``, following ``after`` edges, or None."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for dependency in graph[node]:
            if state.get(dependency) == 1:
                return [*path[path.index(dependency) :], dependency]
            if dependency not in state:
                cycle = visit(dependency)
                if cycle is not None:
                    return cycle
        path.pop()
        state[node] = 2
        return None

    for node in order:
        if node not in state:
            cycle = visit(node)
            if cycle is not None:
                return cycle
    return None


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
    call_scope = scope.inside_call()
    if step.kind == "http":
        yield from call_scope.check(step.call.input, (*path, "http"))
    else:
        yield from call_scope.check(step.call.input, (*path, "input"))
    if step.kind == "task":
        yield from _check_task(ir, step.call.task, (*path, "task"))
    if step.compensate is not None:
        compensate_path = (*path, "compensate")
        yield from _check_task(ir, step.compensate.call.task, (*compensate_path, "task"))
        # A compensation runs after the execution failed: any step may have
        # succeeded by then, this one included, but no fan-out unit is bound.
        every_step = _Scope(ir, visible=scope.all_steps, all_steps=scope.all_steps, attempt=True)
        yield from every_step.check(step.compensate.call.input, (*compensate_path, "input"))


def _check_task(ir: WorkflowIR, task: str, path: Path) -> Iterator[Finding]:
    if task not in ir.tasks and task != HTTP_TASK:
        yield (
            path,
            f"undeclared task {task!r}{did_you_mean(task, ir.tasks)}; declare it under tasks",
        )


@dataclass(frozen=True)
class _Scope:
    """What expressions at one place may read."""

    ir: WorkflowIR
    visible: frozenset[str]
    """Steps sure to be done (or skipped) before this place runs."""
    all_steps: frozenset[str]
    item: bool = False
    """Whether ``item`` and ``index`` are bound (inside a ``for`` unit)."""
    attempt: bool = False
    """Whether ``execution.attempt`` is known (inside a dispatched call)."""

    def inside_call(self) -> _Scope:
        return _Scope(self.ir, self.visible, self.all_steps, self.item, attempt=True)

    def check(self, template: Any, path: Path) -> Iterator[Finding]:
        for inner, source in iter_expressions(template):
            where = (*path, *inner)
            try:
                expression = compile_expression(source)
            except ExpressionSyntaxError as error:
                yield where, f"invalid expression: {error}"
                continue
            yield from ((where, message) for message in self._messages(expression.references))

    def _messages(self, references: Any) -> Iterator[str]:
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
        if step_id not in self.all_steps:
            yield f"undeclared step {step_id!r}{did_you_mean(step_id, self.all_steps)}"
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
