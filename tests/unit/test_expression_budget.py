"""Every evaluation of an expression is bounded; ``map`` and ``filter`` are linear.

Measured before: ``size(lists.range(15000).map(x, x))`` took 8 s of CPU (the CEL
library's ``map`` copies its list at every element), and eight chained ``replace``
calls built a 100 MB string from a 200-character query. Now the first takes about
0.03 s, and whatever would pass the budget is refused with ``EXPRESSION_LIMIT``.
"""

import textwrap
import time
from typing import Any

import pytest

from orbit_model._cel import native as cel
from orbit_model._cel import stdlib
from orbit_model.cel_budget import COST_LIMIT, VALUE_LIMIT
from orbit_model.cel_rewrite import metered
from orbit_model.errors import ErrorCode, OrbitError
from orbit_model.events import StepFailed
from orbit_model.expressions import ExpressionScope, ExpressionSyntaxError, compile_expression

from .decider.test_scenarios import fails_with, make, orbit_err

GENEROUS = 2.0
"""CPU seconds: dozens of times what each bounded evaluation here measured."""


def evaluate(source: str, **scope: Any) -> Any:
    return compile_expression(source).evaluate(ExpressionScope(**scope))


def refused(source: str, **scope: Any) -> str:
    """The message of the ``EXPRESSION_LIMIT`` evaluating ``source`` ends with, in
    bounded CPU time."""
    started = time.process_time()
    with pytest.raises(OrbitError) as caught:
        evaluate(source, **scope)
    assert time.process_time() - started < GENEROUS
    assert caught.value.code is ErrorCode.EXPRESSION_LIMIT, caught.value.message
    return caught.value.message


def test_map_and_filter_take_linear_time() -> None:
    # Before: 15,000 elements, 8 s; the cost grew with the square of the length.
    items = list(range(15_000))
    started = time.process_time()
    assert evaluate("size(lists.range(15000).map(x, x))") == 15_000
    assert evaluate("input.items.map(i, i * 2)[14999]", input={"items": items}) == 29_998
    assert len(evaluate("input.filter(i, i % 2 == 0)", input=items)) == 7_500
    assert time.process_time() - started < GENEROUS


@pytest.mark.parametrize(
    "source",
    [
        "size(lists.range(200000).map(x, x))",
        "lists.range(2000).all(a, lists.range(2000).all(b, a != b || true))",
        "size(lists.range(3000).map(a, lists.range(3000).filter(b, b > a)))",
        "lists.range(1000).exists(a, lists.range(1000).exists_one(b, a == -1))",
        "size(lists.range(5000).distinct())",
        "sets.intersects(lists.range(3000), lists.range(3000).map(x, -x - 1))",
        "input.all(x, true)",
    ],
)
def test_comprehensions_and_functions_are_refused_past_the_budget(source: str) -> None:
    message = refused(source, input=list(range(600_000)))
    assert message.endswith(f"it costs more than {COST_LIMIT:,} units (its budget)")


def test_a_string_blowup_is_refused_before_it_is_made() -> None:
    # The probe's 200-character query: eight replaces, each ten times longer.
    source = "input.s" + '.replace("a", "aaaaaaaaaa")' * 8
    assert len(source) < 250
    message = refused(source, input={"s": "a"})
    assert message.endswith(f"(the limit is {VALUE_LIMIT:,})")
    assert "replace makes a value of about 10,000,000 bytes" in message
    assert "lists.range makes a value of about 16,000,000 bytes" in refused("lists.range(2000000)")


def test_the_limit_holds_where_cel_would_swallow_the_error() -> None:
    assert refused("size(lists.range(200000).map(x, x)) > 0 || true").endswith("(its budget)")


def test_a_map_over_a_list_of_10000_records_fits() -> None:
    items = [{"sku": f"s-{n}", "quantity": n % 7, "price": 1.5} for n in range(10_000)]
    total = evaluate(
        "input.items.filter(i, i.quantity > 0).map(i, double(i.quantity) * i.price)",
        input={"items": items},
    )
    assert len(total) == 10_000 - len(range(0, 10_000, 7))


SAME = [
    "[1, 2, 3].map(x, x * 2)",
    "[1, 2, 3].map(x, x > 1, x * 10)",
    "[1, 2, 3, 4].filter(x, x % 2 == 0).map(y, y + 1)",
    "[[1, 2], [3]].map(x, x.map(y, y + 1))",
    '{"a": 1, "b": 2}.map(k, k + "!").sort()',  # a map's order is the library's hash order
    '{"a": 1, "b": 2}.filter(k, k == "b")',
    "[1, 2, 3].all(x, x > 0) && [1, 2].exists(x, x == 2) && [1, 2].exists_one(x, x == 2)",
    "[1, 2].existsOne(x, x > 5) || 2 in [1, 2].map(x, x)",
    "size([1, 2].map(x, [x, x]).map(p, p[0] + p[1]))",
    "input.items.map(i, i.n).filter(n, n >= 2 && n <= 3)",
    "has(input.items) ? input.items.map(i, {'n': i.n, 'half': double(i.n) / 2.0}) : []",
    "-[1, 2].map(x, x)[0] + 1 == 0 && !false ? 1 : 2",
    '"abc".split("").map(c, c.upperAscii()).join("-")',
    "lists.range(4).map(x, x * x).sort().reverse()",
]


@pytest.mark.parametrize("source", SAME)
def test_metered_macros_mean_what_the_library_s_mean(source: str) -> None:
    scope = {"input": {"items": [{"n": 1}, {"n": 2}, {"n": 3}]}}
    context = cel.Context(variables=scope)
    stdlib.add_stdlib_to_context(context)
    assert metered(source) is not None
    assert evaluate(source, **scope) == cel.compile(source).execute(context)


def test_a_failing_macro_body_fails_as_before() -> None:
    with pytest.raises(OrbitError) as caught:
        evaluate("[1, 0].map(x, 1 / x)")
    assert caught.value.code is ErrorCode.EXPRESSION_ERROR
    assert "division by zero" in caught.value.message


def test_the_budget_s_names_are_reserved() -> None:
    with pytest.raises(ExpressionSyntaxError, match="__orbit_push is reserved"):
        compile_expression("__orbit_push(1, 1, 2)")


def test_a_step_input_past_the_budget_fails_the_step_with_expression_limit() -> None:
    sim = make(
        textwrap.dedent(
            """
            tasks:
              t: {version: "1"}
            steps:
              - id: copy
                task: t
                input: ${ input.items.map(i, lists.range(1000).map(j, i + j)) }
            """
        )
    )
    sim.start({"items": list(range(1000))})
    (failed, *rest) = sim.history[2:]
    assert isinstance(failed, StepFailed)
    assert failed.error.code == ErrorCode.EXPRESSION_LIMIT
    assert rest == fails_with("copy", failed.error)
    assert sim.state.error is not None
    assert sim.state.error.code == "EXPRESSION_LIMIT"
    assert orbit_err(ErrorCode.EXPRESSION_LIMIT, failed.error.message) == failed.error
