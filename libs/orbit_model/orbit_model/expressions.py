"""CEL expressions: recognised in templates, compiled once, analysed, evaluated.

A string that is exactly ``${ … }`` is an expression; every other string is
literal. Maps and lists (templates) are walked so any leaf may be one.
Expressions are compiled by the ``cel`` library (the CEL core plus its
extended standard library); this module adds what the compiler needs on top:
the names an expression reads (``steps.charge``, ``signals.approval``,
``execution.attempt``), so references can be checked before anything runs.
"""

from __future__ import annotations

import datetime
import math
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

from orbit_model._cel import native as cel
from orbit_model.cel_budget import EXTENDED_FUNCTIONS, MACRO_FUNCTIONS, Budget, Make
from orbit_model.cel_rewrite import RESERVED_PREFIX, metered
from orbit_model.cel_tokens import Token, string_value
from orbit_model.cel_tokens import tokens as tokens_of
from orbit_model.errors import DefinitionProblem, ErrorCode, OrbitError

_WHOLE_EXPRESSION = re.compile(r"\A\$\{(.*)\}\Z", re.DOTALL)

#: The roots an expression may name, besides comprehension variables.
SCOPE_ROOTS = frozenset({"input", "steps", "signals", "item", "index", "execution"})
#: The fields of ``execution`` in scope.
EXECUTION_FIELDS = frozenset({"id", "workflow", "version", "attempt"})
#: The fields of ``steps.<id>`` in scope.
STEP_FIELDS = frozenset({"output", "status"})
# Namespaces of the extended standard library (``math.greatest``): CEL
# reports them as variables, but they are function names.
_FUNCTION_NAMESPACES = frozenset({"math", "sets", "strings", "lists", "base64"})
# Macros that bind one (or, for some, two) comprehension variables.
_MACROS_ONE = frozenset({"map", "filter"})
_MACROS_TWO = frozenset(
    {"all", "exists", "exists_one", "existsOne", "transformList", "transformMap"}
)


class ExpressionSyntaxError(DefinitionProblem):
    """An expression CEL cannot parse; the message says where."""


def expression_source(value: object) -> str | None:
    """The CEL source inside ``${ … }``, or None if ``value`` is not an expression."""
    if not isinstance(value, str):
        return None
    match = _WHOLE_EXPRESSION.match(value)
    return match.group(1).strip() if match else None


def canonical_expression(source: str) -> str:
    """The one spelling of an expression used in the IR: ``${ source }``."""
    return "${ " + source.strip() + " }"


@dataclass(frozen=True)
class Access:
    """A static read of a member of a scope root: ``steps.charge.output``.

    Attributes:
        root: ``steps``, ``signals`` or ``execution``.
        member: The step id, signal name or execution field.
        field: For ``steps``, the field read after the id (``output``,
            ``status``), or None if the step itself is used.
    """

    root: str
    member: str
    field: str | None = None


@dataclass(frozen=True)
class References:
    """What an expression reads, found without running it.

    Attributes:
        roots: The scope roots it names (``input``, ``steps``, …).
        unknown: Names it reads that are neither roots nor bound by a
            comprehension inside it: undeclared variables.
        accesses: Its static member reads.
    """

    roots: frozenset[str] = frozenset()
    unknown: frozenset[str] = frozenset()
    accesses: tuple[Access, ...] = field(default_factory=tuple)
    dynamic: frozenset[str] = frozenset()
    """The roots among ``steps``, ``signals`` and ``execution`` it also reads other than
    by a static member (``steps[name]``, ``signals`` as a whole)."""

    def members(self, root: str) -> set[str]:
        """The members of ``root`` read statically."""
        return {access.member for access in self.accesses if access.root == root}


@dataclass(frozen=True)
class Expression:
    """A compiled expression: evaluate it many times, compile it once."""

    source: str
    program: Any = field(repr=False, compare=False)
    """What runs: the source with its macros metered (:mod:`orbit_model.cel_rewrite`)."""
    references: References
    functions: tuple[tuple[str, Make], ...] = field(default=(), repr=False, compare=False)
    """The extended functions (``cel.stdlib``) it may call, and the metered macros'
    functions if it has a macro: registering all 48 on every evaluation cost more
    than most evaluations themselves."""

    def evaluate(self, scope: ExpressionScope) -> Any:
        """Evaluate against ``scope``, within a budget; the result is a JSON value.

        Raises:
            OrbitError: ``EXPRESSION_LIMIT`` past the budget
                (:mod:`orbit_model.cel_budget`); ``EXPRESSION_ERROR`` when evaluation
                fails or the result is not a JSON value (a timestamp, a duration, bytes).
        """
        context = cel.Context(variables=scope.variables(self.references))
        budget = Budget()
        for name, make in self.functions:
            context.add_function(name, make(budget))
        failure: str | None = None
        try:
            result = self.program.execute(context)
        except Exception as error:
            # The library raises KeyError, TypeError, RuntimeError,
            # ZeroDivisionError, …, and its Python extension functions may
            # raise anything; each means this expression failed on this scope.
            failure = _first_line(error)
        if budget.exceeded is not None:  # even if CEL swallowed it (``error || true``)
            raise OrbitError(ErrorCode.EXPRESSION_LIMIT, f"${{ {self.source} }}: {budget.exceeded}")
        if failure is not None:
            raise OrbitError(ErrorCode.EXPRESSION_ERROR, f"${{ {self.source} }}: {failure}")
        return _as_json(result, self.source)


@lru_cache(maxsize=4096)
def compile_expression(source: str) -> Expression:
    """Compile CEL source (without the ``${ }``), memoised by source.

    Raises:
        ExpressionSyntaxError: The source does not parse, or names one of the
            functions Orbit meters macros with.
    """
    if not source.strip():
        raise ExpressionSyntaxError("the expression is empty")
    try:
        original = cel.compile(source)
    except (ValueError, RuntimeError) as error:
        raise ExpressionSyntaxError(_syntax_message(str(error))) from None
    identifiers = {token.text for token in tokens_of(source) if token.kind == "ident"}
    reserved = sorted(name for name in identifiers if name.startswith(RESERVED_PREFIX))
    if reserved:
        raise ExpressionSyntaxError(
            f"{reserved[0]} is reserved: names starting with {RESERVED_PREFIX} are Orbit's own"
        )
    program, functions = original, _functions_named(identifiers)
    try:
        executable = metered(source)
        if executable is not None:
            program, functions = cel.compile(executable), functions + MACRO_FUNCTIONS
    except (ValueError, RuntimeError) as error:  # a source Orbit's rewriting misreads
        raise ExpressionSyntaxError(f"Orbit cannot bound this expression's cost: {error}") from None
    return Expression(
        source=source,
        program=program,
        references=_analyse(source, original),
        functions=functions,
    )


def _functions_named(identifiers: set[str]) -> tuple[tuple[str, Make], ...]:
    """The extended functions whose name (its last part: ``greatest`` of
    ``math.greatest``) is one of ``identifiers``."""
    return tuple(
        (name, function)
        for name, function in EXTENDED_FUNCTIONS
        if name.rpartition(".")[2] in identifiers
    )


@dataclass(frozen=True)
class ExecutionInfo:
    """The ``execution`` root: what an expression may know of its execution."""

    id: str
    workflow: str
    version: str
    attempt: int | None = None


@dataclass(frozen=True)
class StepOutcome:
    """What ``steps.<id>`` shows: the output (null until it succeeded) and status."""

    status: str = "pending"
    output: Any = None


@dataclass(frozen=True)
class ExpressionScope:
    """Everything an expression can read; the one scope type of Orbit.

    ``item`` and ``index`` are bound only when ``index`` is set (inside a
    ``for`` unit); ``signals`` holds the last payload received per name.
    """

    input: Any = None
    steps: Mapping[str, StepOutcome] = field(default_factory=dict)
    signals: Mapping[str, Any] = field(default_factory=dict)
    execution: ExecutionInfo | None = None
    item: Any = None
    index: int | None = None

    def variables(self, references: References | None = None) -> dict[str, Any]:
        """The scope as CEL variables: all of it, or what ``references`` read.

        Converting a value to CEL costs in proportion to its size, and an
        execution's step outputs grow with every step: an expression that
        names its steps statically (``steps.charge.output``) gets only those.
        """
        roots = SCOPE_ROOTS if references is None else references.roots
        variables: dict[str, Any] = {}
        if "input" in roots:
            variables["input"] = self.input
        if "steps" in roots:
            steps = self.steps
            names = _static_members(references, "steps")
            if names is not None:
                steps = {name: steps[name] for name in names if name in steps}
            variables["steps"] = {
                step_id: {"status": view.status, "output": view.output}
                for step_id, view in steps.items()
            }
        if "signals" in roots:
            variables["signals"] = dict(self.signals)
        if self.execution is not None and "execution" in roots:
            execution: dict[str, Any] = {
                "id": self.execution.id,
                "workflow": self.execution.workflow,
                "version": self.execution.version,
            }
            if self.execution.attempt is not None:
                execution["attempt"] = self.execution.attempt
            variables["execution"] = execution
        if self.index is not None:
            if "item" in roots:
                variables["item"] = self.item
            if "index" in roots:
                variables["index"] = self.index
        return variables


def _static_members(references: References | None, root: str) -> set[str] | None:
    """The members of ``root`` the expression reads, if it reads only those."""
    if references is None or root in references.dynamic:
        return None
    return references.members(root)


def iter_expressions(template: Any) -> Iterator[tuple[tuple[str | int, ...], str]]:
    """Every expression in a template, with its path inside the template."""
    source = expression_source(template)
    if source is not None:
        yield (), source
    elif isinstance(template, Mapping):
        for key, value in template.items():
            for path, inner in iter_expressions(value):
                yield (key, *path), inner
    elif isinstance(template, list):
        for index, value in enumerate(template):
            for path, inner in iter_expressions(value):
                yield (index, *path), inner


def evaluate_template(template: Any, scope: ExpressionScope) -> Any:
    """Replace every ``${ … }`` leaf of a template by its value in ``scope``.

    Raises:
        OrbitError: ``EXPRESSION_ERROR`` when an expression fails.
    """
    source = expression_source(template)
    if source is not None:
        return compile_expression(source).evaluate(scope)
    if isinstance(template, Mapping):
        return {key: evaluate_template(value, scope) for key, value in template.items()}
    if isinstance(template, list):
        return [evaluate_template(value, scope) for value in template]
    return template


# -- static analysis -------------------------------------------------------


def _analyse(source: str, program: Any) -> References:
    tokens = tokens_of(source)
    bound: set[str] = set()
    accesses: list[Access] = []
    dynamic: set[str] = set()
    for position, token in enumerate(tokens):
        previous = tokens[position - 1].text if position else ""
        if token.kind != "ident":
            continue
        if previous == "." and _text(tokens, position + 1) == "(":
            bound.update(_bound_names(tokens, position))
        elif previous != "." and token.text in ("steps", "signals", "execution"):
            access = _access(tokens, position)
            if access is not None:
                accesses.append(access)
            else:
                dynamic.add(token.text)
    variables = set(program.variables())
    roots = variables & SCOPE_ROOTS
    unknown = variables - SCOPE_ROOTS - bound - _FUNCTION_NAMESPACES
    return References(
        roots=frozenset(roots),
        unknown=frozenset(unknown),
        accesses=tuple(accesses),
        dynamic=frozenset(dynamic),
    )


def _text(tokens: list[Token], position: int) -> str:
    return tokens[position].text if 0 <= position < len(tokens) else ""


def _bound_names(tokens: list[Token], macro: int) -> list[str]:
    """Comprehension variables bound by ``.macro(x, …)`` or ``.macro(k, v, …)``."""
    name = tokens[macro].text
    if name not in _MACROS_ONE | _MACROS_TWO:
        return []
    names: list[str] = []
    position = macro + 2
    limit = 2 if name in _MACROS_TWO else 1
    while (
        len(names) < limit
        and position + 1 < len(tokens)
        and tokens[position].kind == "ident"
        and tokens[position + 1].text == ","
    ):
        names.append(tokens[position].text)
        position += 2
    return names


def _member(tokens: list[Token], position: int) -> tuple[str, int] | None:
    """A static member after ``position``: ``.name`` or ``["name"]``, and where it ends."""
    if _text(tokens, position) == "." and position + 1 < len(tokens):
        following = tokens[position + 1]
        if following.kind == "ident":
            return following.text, position + 2
    if (
        _text(tokens, position) == "["
        and position + 2 < len(tokens)
        and tokens[position + 1].kind == "string"
        and tokens[position + 2].text == "]"
    ):
        return string_value(tokens[position + 1].text), position + 3
    return None


def _access(tokens: list[Token], root: int) -> Access | None:
    member = _member(tokens, root + 1)
    if member is None:
        return None
    name, end = member
    if _text(tokens, end) == "(":
        return None  # a macro or method on the root itself (steps.exists(...)): dynamic
    field_name = None
    if tokens[root].text == "steps":
        following = _member(tokens, end)
        field_name = following[0] if following else None
    return Access(tokens[root].text, name, field_name)


# -- results and messages --------------------------------------------------


def _as_json(value: Any, source: str) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        raise OrbitError(
            ErrorCode.EXPRESSION_ERROR, f"${{ {source} }}: the result {value} is not a JSON number"
        )
    if value is None or isinstance(value, bool | int | float | str):
        return value
    if isinstance(value, list | tuple):
        return [_as_json(item, source) for item in value]
    if isinstance(value, dict):
        return {str(key): _as_json(item, source) for key, item in value.items()}
    kind = {
        bytes: "bytes",
        datetime.datetime: "a timestamp",
        datetime.timedelta: "a duration",
    }.get(type(value), type(value).__name__)
    raise OrbitError(
        ErrorCode.EXPRESSION_ERROR,
        f"${{ {source} }}: the result is {kind}, not a JSON value; convert it with string()",
    )


def _first_line(error: BaseException) -> str:
    if isinstance(error, KeyError) and error.args:
        return f"no such key {error.args[0]!r}"
    text = str(error).strip() or type(error).__name__
    return text.splitlines()[0]


def _syntax_message(text: str) -> str:
    # cel reports "Failed to parse expression '…': ERROR: <input>:1:4: Syntax
    # error: …" followed by a caret diagram; keep position and reason only.
    match = re.search(r"<input>:(\d+):(\d+):\s*(.*)", text)
    if match is None:
        return _first_line(ValueError(text))
    line, column, reason = match.groups()
    reason = re.sub(r"\s*expecting \{.*", "", reason)
    where = f"column {column}" if line == "1" else f"line {line}, column {column}"
    return f"{reason.strip()} (at {where} of the expression)"
