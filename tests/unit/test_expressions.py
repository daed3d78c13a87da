import pytest

from orbit_model.errors import ErrorCode, OrbitError
from orbit_model.expressions import (
    Access,
    ExecutionInfo,
    ExpressionScope,
    ExpressionSyntaxError,
    StepOutcome,
    canonical_expression,
    compile_expression,
    evaluate_template,
    expression_source,
    iter_expressions,
)


@pytest.mark.parametrize(
    ("value", "source"),
    [
        ("${ input.x }", "input.x"),
        ("${input.x}", "input.x"),
        ("${\n  input.x\n}", "input.x"),
        ("${ {'a': 1} }", "{'a': 1}"),
        ("a ${ input.x }", None),
        ("${ input.x } b", None),
        ("plain", None),
        (3, None),
    ],
)
def test_only_whole_strings_are_expressions(value: object, source: str | None) -> None:
    assert expression_source(value) == source


def test_canonical_spelling() -> None:
    assert canonical_expression("  input.x ") == "${ input.x }"


def test_references_are_found_without_running() -> None:
    references = compile_expression(
        'steps.charge.output != null && steps["cool-down"].status == "succeeded"'
        " && signals.approval.ok && execution.id != '' && input.x > 1"
    ).references
    assert references.roots == {"steps", "signals", "execution", "input"}
    assert set(references.accesses) == {
        Access("steps", "charge", "output"),
        Access("steps", "cool-down", "status"),
        Access("signals", "approval"),
        Access("execution", "id"),
    }
    assert references.unknown == set()


def test_comprehension_variables_and_function_namespaces_are_not_unknown() -> None:
    references = compile_expression(
        "input.items.map(i, i.price).exists(p, p > 1) && input.m.all(k, v, v > 0)"
        " && math.greatest([1, 2]) > 0 && undeclared == 1"
    ).references
    assert references.unknown == {"undeclared"}


def test_member_access_on_a_field_is_not_a_root() -> None:
    references = compile_expression("input.steps.x").references
    assert references.accesses == ()


def test_strings_do_not_hide_or_fake_references() -> None:
    references = compile_expression('"steps.fake.output" + steps.real.status').references
    assert references.members("steps") == {"real"}


@pytest.mark.parametrize("source", ["a +", "a.b(", "", "   ", "[1, 2"])
def test_syntax_errors(source: str) -> None:
    with pytest.raises(ExpressionSyntaxError):
        compile_expression(source)


def test_syntax_error_names_the_column() -> None:
    with pytest.raises(ExpressionSyntaxError, match="column 4 of the expression"):
        compile_expression("a +")


def _scope() -> ExpressionScope:
    return ExpressionScope(
        input={"x": 2, "items": [1, 2, 3], "name": "orbit"},
        steps={"a": StepOutcome("succeeded", {"n": 5}), "b": StepOutcome()},
        signals={"approval": {"approved": True}},
        execution=ExecutionInfo(id="e-1", workflow="w", version="1.0.0", attempt=2),
        item="it",
        index=1,
    )


@pytest.mark.parametrize(
    ("template", "value"),
    [
        ("${ input.x + 1 }", 3),
        ("${ steps.a.output.n * input.x }", 10),
        ("${ steps.b.output == null }", True),
        ("${ steps.b.status }", "pending"),
        ("${ signals.approval.approved }", True),
        ("${ execution.id + '/' + string(execution.attempt) }", "e-1/2"),
        ("${ [item, index] }", ["it", 1]),
        ("${ size(input.items) }", 3),
        ("${ input.items.map(i, i * 2) }", [2, 4, 6]),
        ("${ input.name.upperAscii() }", "ORBIT"),
        # One of each library of extended functions, registered only where named.
        ("${ math.greatest(input.items) }", 3),
        ("${ 'a,b'.split(',') }", ["a", "b"]),
        ("${ sets.contains(input.items, [2]) }", True),
        ("${ base64.encode(b'hi') }", "aGk="),
        ("${ [3, 1, 2].sort() }", [1, 2, 3]),
        ("${ max(input.items) }", 3),
        # Steps read as a whole see every step, a step read by name sees itself.
        ("${ size(steps) }", 2),
        ("${ steps['a'].output.n }", 5),
        ("${ steps.a.output.n + size(steps) }", 7),
        ("${ steps.exists(k, k == 'b') }", True),  # a macro on steps reads them all
        # A raw string ends at its quote, a backslash before it included.
        (r"${ r'C:\' + input.name }", "C:\\orbit"),
        (r"${ r'\' + 'ab'.upperAscii() }", "\\AB"),
        ("${ {'k': input.x} }", {"k": 2}),
        (
            {"a": "${ input.x }", "b": ["${ index }", "lit", 4], "c": None},
            {"a": 2, "b": [1, "lit", 4], "c": None},
        ),
        ("not ${ an } expression", "not ${ an } expression"),
    ],
)
def test_evaluates_templates(template: object, value: object) -> None:
    assert evaluate_template(template, _scope()) == value


def test_an_expression_gets_only_the_steps_it_names() -> None:
    scope = _scope()
    named = compile_expression("steps.a.output.n + input.x")
    assert named.references.dynamic == frozenset()
    assert scope.variables(named.references) == {
        "input": scope.input,
        "steps": {"a": {"status": "succeeded", "output": {"n": 5}}},
    }
    whole = compile_expression("size(steps) > 0 && steps.a.status == 'succeeded'")
    assert whole.references.dynamic == {"steps"}
    assert set(scope.variables(whole.references)["steps"]) == {"a", "b"}


def test_item_and_index_are_bound_only_inside_a_unit() -> None:
    assert "item" not in ExpressionScope().variables()
    assert ExpressionScope(item=None, index=0).variables()["item"] is None


@pytest.mark.parametrize(
    ("template", "message"),
    [
        ("${ input.missing.deeper }", "input.missing.deeper"),
        ("${ input.x + 1.5 }", "No such overload"),
        ("${ nope }", "Undefined variable"),
        ('${ duration("1s") }', "the result is a duration"),
        ('${ b"x" }', "the result is bytes"),
        ('${ timestamp("2026-01-01T00:00:00Z") }', "the result is a timestamp"),
        ("${ 1 / 0 }", "division by zero"),
        ("${ 1.0 / 0.0 }", "the result inf is not a JSON number"),
        ('${ double("nan") }', "the result nan is not a JSON number"),
        ('${ {"a": 1}.b }', "no such key 'b'"),
        ('${ "abc".substring(5) }', "substring"),
    ],
)
def test_evaluation_errors_have_a_code(template: str, message: str) -> None:
    with pytest.raises(OrbitError, match=message) as caught:
        evaluate_template(template, _scope())
    assert caught.value.code is ErrorCode.EXPRESSION_ERROR


def test_iter_expressions_gives_paths() -> None:
    template = {"a": ["x", "${ input.a }"], "b": {"c": "${ input.c }"}}
    assert sorted(iter_expressions(template)) == [(("a", 1), "input.a"), (("b", "c"), "input.c")]
