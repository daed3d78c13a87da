"""Workflow YAML to a checked definition, in three passes.

1. YAML: :func:`~orbit_model.yaml_source.load_yaml` gives plain values and
   the line of every path.
2. Structure: the strict source models (:mod:`orbit_model.source`) refuse
   unknown keys and wrong types; :mod:`orbit_model.builder` resolves kinds
   and defaults into the IR.
3. Meaning: :func:`~orbit_model.checks.check_workflow` checks names,
   schemas, references, cycles and expressions on the IR.

Every problem of the first pass that finds any is reported (up to
:data:`~orbit_model.limits.MAX_PROBLEMS`), each as ``FILE:LINE: path: what is
wrong``; a later pass runs only on a clean result of the one before, because
its checks need that result. The limits of :mod:`orbit_model.limits` are
checked on the YAML's values before pass 2 and on the IR before pass 3.
``definition_from_ir`` takes compiled JSON through pass 3.
"""

from __future__ import annotations

import types
import typing
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ValidationError

from orbit_model.builder import STEP_KINDS, build_workflow
from orbit_model.checks import Finding, check_workflow
from orbit_model.ir import WorkflowIR
from orbit_model.limits import MAX_IR_BYTES, MAX_PROBLEMS, count_problems
from orbit_model.payloads import payload_problem
from orbit_model.problems import DefinitionError, Problem, did_you_mean, format_path
from orbit_model.source import SourceWorkflow
from orbit_model.yaml_source import Path, SourceDocument, YamlSourceError, load_yaml


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
        DefinitionError: Listing the problems found (up to
            :data:`~orbit_model.limits.MAX_PROBLEMS`), each with its line.
    """
    try:
        document = load_yaml(text, file)
    except YamlSourceError as error:
        problem = Problem(file, error.line, format_path(error.path), error.reason)
        raise DefinitionError([problem]) from None
    data = document.data
    if data is None:
        raise DefinitionError([Problem(file, 1, "", "the file holds no workflow")])
    if not isinstance(data, dict):
        raise DefinitionError([Problem(file, 1, "", "a workflow file must be a mapping of keys")])
    # Before anything is built of them: twenty thousand steps are refused at once.
    _refuse(
        count_problems([("steps", data.get("steps")), ("finally", data.get("finally"))]), document
    )
    try:
        source = SourceWorkflow.model_validate(data)
    except ValidationError as error:
        raise DefinitionError(_first(_structure_problems(error, document), file)) from None
    ir, findings = build_workflow(source)
    _refuse(findings, document)
    assert ir is not None  # a build that returns no IR always reports why
    _refuse(_over_limits(ir), document)
    _refuse(check_workflow(ir), document)
    return Definition(ir=ir, hash=ir.definition_hash())


def definition_from_ir(
    data: str | bytes | dict[str, Any], file: str = "<ir>", *, limits: bool = True
) -> Definition:
    """Check an IR given as JSON (text or parsed) and return its :class:`Definition`.

    ``limits``: whether to hold it to :mod:`orbit_model.limits`; False for a
    definition read back from the store, held to the limits of its day.

    Raises:
        DefinitionError: The JSON is not a valid IR, is past the limits, or fails
            the checks of meaning.
    """
    try:
        if isinstance(data, dict):
            ir = WorkflowIR.model_validate(data)
        else:
            ir = WorkflowIR.model_validate_json(data)
    except ValidationError as error:
        problems = (
            Problem(file, None, format_path(_ir_path(item)), _message(item))
            for item in error.errors()
        )
        raise DefinitionError(_first(problems, file)) from None
    if limits:
        _refuse(_over_limits(ir), file)
    _refuse(check_workflow(ir), file)
    return Definition(ir=ir, hash=ir.definition_hash())


def _over_limits(ir: WorkflowIR) -> list[Finding]:
    """What of a compiled definition is past the limits (:mod:`orbit_model.limits`)."""
    over = list(count_problems([("steps", ir.steps), ("finally", ir.finally_steps)]))
    if not over:
        size = len(ir.canonical_json().encode("utf-8"))
        if size > MAX_IR_BYTES:
            message = f"the compiled definition is {size:,} bytes of JSON; the limit is"
            over.append(((), f"{message} {MAX_IR_BYTES:,}"))
    return over


def _refuse(findings: Iterable[Finding], source: SourceDocument | str) -> None:
    """Raise the error of ``findings``, if any: with their lines if ``source`` is the YAML,
    else under the file name ``source``.

    Raises:
        DefinitionError: Listing the first :data:`~orbit_model.limits.MAX_PROBLEMS`.
    """
    if isinstance(source, str):
        problems = (Problem(source, None, format_path(path), text) for path, text in findings)
    else:
        problems = (
            Problem(source.name, source.line_of(path), format_path(path), text)
            for path, text in findings
        )
    listed = _first(problems, source if isinstance(source, str) else source.name)
    if listed:
        raise DefinitionError(listed)


def _first(problems: Iterable[Problem], file: str) -> list[Problem]:
    """The first :data:`~orbit_model.limits.MAX_PROBLEMS` of ``problems``, and one more
    saying so if more follow; the rest is never computed."""
    listed: list[Problem] = []
    for problem in problems:
        if len(listed) == MAX_PROBLEMS:
            more = f"more problems follow; only the first {MAX_PROBLEMS} are listed"
            listed.append(Problem(file, None, "", more))
            break
        listed.append(problem)
    return listed


# -- structure errors ------------------------------------------------------


def _structure_problems(error: ValidationError, document: SourceDocument) -> Iterator[Problem]:
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
        yield Problem(document.name, line, format_path(path), message)


# Pydantic's messages speak of "input", which reads like Orbit's `input` key,
# and name internal classes; these say what was expected instead.
_EXPECTED = {
    "string_type": "expected a string",
    "int_type": "expected an integer",
    "int_from_float": "expected an integer",
    "float_type": "expected a number",
    "bool_type": "expected true or false",
    "dict_type": "expected a mapping",
    "model_type": "expected a mapping",
    "model_attributes_type": "expected a mapping",
    "list_type": "expected a list",
    "tuple_type": "expected a list",
    "literal_error": "expected {expected}",
    "too_short": "needs at least {min_length}",
    "greater_than_equal": "must be at least {ge}",
    "union_tag_invalid": "{tag!r} is not one of {expected_tags}",
    "union_tag_not_found": "missing required key",
}


def _message(item: Any) -> str:
    template = _EXPECTED.get(item["type"])
    if template is not None:
        try:
            return template.format(**item.get("ctx", {}))
        except KeyError:
            pass
    message = str(item["msg"])
    for prefix in ("Value error, ", "Assertion failed, "):
        message = message.removeprefix(prefix)
    message = message.replace("Input should be", "should be")
    if message[1:2].islower():  # lower-case a sentence, not an acronym (YAML, JSON)
        message = message[:1].lower() + message[1:]
    return message


def _ir_path(item: Any) -> Path:
    """The IR path of a validation error, without pydantic's union branch.

    Pydantic reports ``steps.0.sleep.duration_ms`` (the branch it tried) and,
    for a bad ``kind``, the step rather than its ``kind``.
    """
    loc: Path = tuple(item["loc"])
    path = tuple(
        part
        for position, part in enumerate(loc)
        if not (position > 0 and isinstance(loc[position - 1], int) and part in STEP_KINDS)
    )
    if item["type"] in ("union_tag_invalid", "union_tag_not_found"):
        path = (*path, str(item.get("ctx", {}).get("discriminator", "kind")).strip("'"))
    return path


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


BODY_FILE = "<body>"
MAX_IR_DEPTH = 1000
"""How deep a compiled definition may nest: far past any real one, short of what the
JSON readers that store and read it back can take."""
"""The file name the problems of a definition sent as a request body are reported under."""


def definition_from_body(body: bytes, is_ir: bool) -> Definition:
    """A definition sent as a request body: compiled IR (JSON) if ``is_ir``, else YAML.

    Raises:
        DefinitionError: ``INVALID_DEFINITION``, listing every problem (with its line
            for YAML), or saying that the body is not UTF-8 text.
    """
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError as error:
        problem = Problem(BODY_FILE, None, "", f"the body is not UTF-8 text ({error.reason})")
        raise DefinitionError([problem]) from None
    if is_ir:
        definition = definition_from_ir(text, BODY_FILE)
    else:
        definition = compile_definition(text, BODY_FILE)
    # A NUL or a lone surrogate (in a description, a schema, a name) Postgres cannot
    # store: refused here as the definition's problem, not by the database.
    unstorable = payload_problem(definition.ir.to_json_data(), max_depth=MAX_IR_DEPTH)
    if unstorable is not None:
        raise DefinitionError([Problem(BODY_FILE, None, "", f"the definition {unstorable}")])
    return definition
