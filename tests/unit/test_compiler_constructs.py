"""Every construct of the workflow language, checked in the compiled IR."""

from pathlib import Path
from textwrap import dedent
from typing import Any

import pytest

from orbit_model import DefinitionError, compile_definition, definition_from_ir
from orbit_model.ir import (
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

EXAMPLES = sorted((Path(__file__).parents[2] / "examples").glob("*.yaml"))

HEADER = "orbit: 1\nworkflow: wf\nversion: 1.0.0\n"


def compile_ir(body: str) -> WorkflowIR:
    """The IR of a workflow ``wf@1.0.0`` whose remaining keys are ``body``."""
    return compile_definition(HEADER + dedent(body), "wf.yaml").ir


def call_step(ir: WorkflowIR, step_id: str) -> CallStep:
    step = ir.step(step_id)
    assert isinstance(step, CallStep)
    return step


# -- the workflow itself -----------------------------------------------------


def test_top_level_fields() -> None:
    ir = compile_ir(
        """\
        description: Greets.
        timeout: 2h
        input:
          type: object
          properties:
            name: {type: string, default: world}
        output_schema: {type: object, required: [greeting]}
        tasks:
          greet: {version: "1"}
        steps:
          - id: greet
            task: greet
        """
    )
    assert ir.ir_version == 1
    assert ir.name == "wf"
    assert ir.version == "1.0.0"
    assert ir.description == "Greets."
    assert ir.timeout_ms == 7_200_000
    assert ir.input_schema == {
        "type": "object",
        "properties": {"name": {"type": "string", "default": "world"}},
    }
    assert ir.output_schema == {"type": "object", "required": ["greeting"]}


def test_optional_top_level_fields_default_to_empty() -> None:
    ir = compile_ir(
        """\
        steps:
          - id: a
            sleep: 1s
        """
    )
    assert ir.description is None
    assert ir.timeout_ms is None
    assert ir.input_schema is None
    assert ir.output_schema is None
    assert ir.signals == {}
    assert ir.queries == {}
    assert ir.tasks == {}
    assert ir.finally_steps == ()


def test_definition_ref_and_hash() -> None:
    definition = compile_definition(HEADER + "steps:\n  - id: a\n    sleep: 1s\n", "wf.yaml")
    assert definition.ref == "wf@1.0.0"
    assert definition.hash == definition.ir.definition_hash()
    assert definition.hash.startswith("sha256:")
    assert len(definition.hash) == len("sha256:") + 64


def test_task_contracts() -> None:
    ir = compile_ir(
        """\
        tasks:
          charge-card:
            version: "2"
            input: {type: object}
            output: {type: object, required: [amount]}
          ship-item: {version: 1}
        steps:
          - id: a
            task: ship-item
        """
    )
    assert ir.tasks == {
        "charge-card": TaskContract(
            version="2",
            input_schema={"type": "object"},
            output_schema={"type": "object", "required": ["amount"]},
        ),
        "ship-item": TaskContract(version="1"),
    }


def test_signals() -> None:
    ir = compile_ir(
        """\
        signals:
          approval:
            type: object
            required: [approved]
            properties: {approved: {type: boolean}}
          anything: {}
          untyped:
        steps:
          - id: a
            await: approval
        """
    )
    assert ir.signals == {
        "approval": {
            "type": "object",
            "required": ["approved"],
            "properties": {"approved": {"type": "boolean"}},
        },
        "anything": {},
        "untyped": None,
    }


def test_queries() -> None:
    ir = compile_ir(
        """\
        queries:
          charged: ${ steps.charge.output != null }
          stage: ${steps.charge.status}
        tasks:
          t: {version: "1"}
        steps:
          - id: charge
            task: t
        """
    )
    assert ir.queries == {
        "charged": "${ steps.charge.output != null }",
        "stage": "${ steps.charge.status }",
    }


# -- step kinds --------------------------------------------------------------


def test_task_step_with_an_input_template() -> None:
    ir = compile_ir(
        """\
        tasks:
          reserve: {version: "1"}
        steps:
          - id: reserve
            task: reserve
            input:
              order: ${ input.order_id }
              items: ${input.items}
              fixed: [1, "two", "${ input.three }", {four: 4}]
              text: order ${ input.order_id }
              nothing: null
        """
    )
    step = call_step(ir, "reserve")
    assert step.kind == "task"
    assert step.call.task == "reserve"
    assert step.call.input == {
        "order": "${ input.order_id }",
        "items": "${ input.items }",
        "fixed": [1, "two", "${ input.three }", {"four": 4}],
        "text": "order ${ input.order_id }",
        "nothing": None,
    }
    assert step.for_each is None
    assert step.concurrency is None
    assert step.child is None
    assert step.compensate is None
    assert step.when is None
    assert step.continue_on_error is False


def test_task_step_without_input() -> None:
    ir = compile_ir(
        """\
        tasks:
          t: {version: "1"}
        steps:
          - id: a
            task: t
        """
    )
    assert call_step(ir, "a").call.input is None


def test_task_step_with_a_whole_expression_as_input() -> None:
    ir = compile_ir(
        """\
        tasks:
          t: {version: "1"}
        steps:
          - id: a
            task: t
            input: '${ {"order": input.order_id} }'
        """
    )
    assert call_step(ir, "a").call.input == '${ {"order": input.order_id} }'


def test_await_step_with_a_timeout() -> None:
    ir = compile_ir(
        """\
        signals:
          approval: {}
        steps:
          - id: approval
            await: approval
            timeout: 24h
          - id: again
            await: approval
        """
    )
    assert ir.steps[0] == AwaitStep(
        kind="await", id="approval", signal="approval", timeout_ms=86_400_000
    )
    again = ir.steps[1]
    assert isinstance(again, AwaitStep)
    assert again.timeout_ms is None
    assert again.after == ("approval",)


@pytest.mark.parametrize("duration", ["10m", "PT10M", "600s", "600000ms", "pt10m", "0.1h4m"])
def test_sleep_durations(duration: str) -> None:
    ir = compile_ir(
        f"""\
        steps:
          - id: cool-down
            sleep: {duration}
        """
    )
    assert ir.steps[0] == SleepStep(kind="sleep", id="cool-down", duration_ms=600_000)


def test_sleep_durations_of_every_unit() -> None:
    ir = compile_ir(
        """\
        steps:
          - id: a
            sleep: 250ms
          - id: b
            sleep: 1d
          - id: c
            sleep: 1h30m
          - id: d
            sleep: P1DT2H
          - id: e
            sleep: PT0.5S
        """
    )
    durations = [step.duration_ms for step in ir.steps if isinstance(step, SleepStep)]
    assert durations == [250, 86_400_000, 5_400_000, 93_600_000, 500]


def test_for_step_with_concurrency() -> None:
    ir = compile_ir(
        """\
        tasks:
          ship-item: {version: "1"}
        steps:
          - id: ship
            for: ${  input.items }
            concurrency: 10
            task: ship-item
            input:
              item: ${ item }
              position: ${ index }
        """
    )
    step = call_step(ir, "ship")
    assert step.for_each == "${ input.items }"
    assert step.concurrency == 10
    assert step.call.input == {"item": "${ item }", "position": "${ index }"}


def test_for_step_over_a_literal_list_without_concurrency() -> None:
    ir = compile_ir(
        """\
        tasks:
          t: {version: "1"}
        steps:
          - id: a
            for: [1, '${ input.x }', {k: v}]
            task: t
            input: ${ item }
        """
    )
    step = call_step(ir, "a")
    assert step.for_each == [1, "${ input.x }", {"k": "v"}]
    assert step.concurrency is None


def test_child_workflow_step() -> None:
    ir = compile_ir(
        """\
        steps:
          - id: invoice
            workflow: send-invoice@1.0.0
            input:
              order: ${ input.order_id }
        """
    )
    step = call_step(ir, "invoice")
    assert step.kind == "workflow"
    assert step.child == ChildRef(name="send-invoice", version="1.0.0")
    assert step.child.hash is None
    assert step.call == TaskCall(
        task="workflow:send-invoice",
        input={"order": "${ input.order_id }"},
        retry=RetryPolicy(max_attempts=1),
        timeouts=Timeouts(),
    )


def test_child_workflow_step_takes_no_defaults() -> None:
    ir = compile_ir(
        """\
        defaults:
          timeout: 5m
          schedule_timeout: 1m
          retry: {max_attempts: 5, initial_interval: 3s}
        steps:
          - id: invoice
            workflow: send-invoice@2.1.0-rc.1+build.5
        """
    )
    step = call_step(ir, "invoice")
    assert step.child == ChildRef(name="send-invoice", version="2.1.0-rc.1+build.5")
    assert step.call.retry == RetryPolicy(max_attempts=1)
    assert step.call.timeouts == Timeouts()


def test_child_workflow_step_with_its_own_retry_timeout_and_for() -> None:
    ir = compile_ir(
        """\
        steps:
          - id: invoices
            workflow: send-invoice@1.0.0
            for: ${ input.orders }
            concurrency: 2
            input: {order: "${ item }"}
            retry: {max_attempts: 3, initial_interval: 5s}
            timeout: 1h
        """
    )
    step = call_step(ir, "invoices")
    assert step.call.retry == RetryPolicy(
        max_attempts=3, initial_interval_ms=5_000, max_interval_ms=500_000
    )
    assert step.call.timeouts == Timeouts(attempt_ms=3_600_000)
    assert step.for_each == "${ input.orders }"
    assert step.concurrency == 2


def test_http_step() -> None:
    ir = compile_ir(
        """\
        steps:
          - id: webhook
            http:
              method: post
              url: ${ input.callback_url }
              headers:
                content-type: application/json
                x-order: ${ input.order_id }
              body:
                order: ${ input.order_id }
                tags: [a, b]
              timeout: 10s
        """
    )
    step = call_step(ir, "webhook")
    assert step.kind == "http"
    assert step.child is None
    assert step.call.task == "orbit.http.request"
    assert step.call.input == {
        "method": "POST",
        "url": "${ input.callback_url }",
        "headers": {"content-type": "application/json", "x-order": "${ input.order_id }"},
        "body": {"order": "${ input.order_id }", "tags": ["a", "b"]},
        "timeout_ms": 10_000,
    }


def test_http_step_with_only_a_url() -> None:
    ir = compile_ir(
        """\
        steps:
          - id: ping
            http: {url: "https://example.com/ping"}
        """
    )
    assert call_step(ir, "ping").call.input == {
        "method": "GET",
        "url": "https://example.com/ping",
    }


def test_http_step_with_an_explicit_null_body() -> None:
    ir = compile_ir(
        """\
        steps:
          - id: ping
            http:
              method: DELETE
              url: http://example.com/item
              body: null
        """
    )
    assert call_step(ir, "ping").call.input == {
        "method": "DELETE",
        "url": "http://example.com/item",
        "body": None,
    }


def test_http_step_takes_the_defaults() -> None:
    ir = compile_ir(
        """\
        defaults:
          timeout: 5m
          retry: {max_attempts: 4}
        steps:
          - id: ping
            http: {url: "https://example.com"}
            heartbeat_timeout: 10s
        """
    )
    call = call_step(ir, "ping").call
    assert call.retry == RetryPolicy(max_attempts=4)
    assert call.timeouts == Timeouts(attempt_ms=300_000, heartbeat_ms=10_000)


# -- conditions and dependencies ---------------------------------------------


def test_if_true_false_and_expression() -> None:
    ir = compile_ir(
        """\
        signals:
          approval: {}
        steps:
          - id: a
            sleep: 1s
            if: true
          - id: b
            sleep: 1s
            if: false
          - id: c
            await: approval
            if: ${steps.a.status == "succeeded"}
          - id: d
            sleep: 1s
        """
    )
    assert [step.when for step in ir.steps] == [
        True,
        False,
        '${ steps.a.status == "succeeded" }',
        None,
    ]


def test_after_defaults_to_the_step_above() -> None:
    ir = compile_ir(
        """\
        steps:
          - id: a
            sleep: 1s
          - id: b
            sleep: 1s
          - id: c
            sleep: 1s
        """
    )
    assert [(step.after, step.explicit_after) for step in ir.steps] == [
        ((), False),
        (("a",), False),
        (("b",), False),
    ]


def test_explicit_after() -> None:
    ir = compile_ir(
        """\
        steps:
          - id: a
            sleep: 1s
          - id: b
            sleep: 1s
            after: []
          - id: c
            sleep: 1s
            after: [b, a, b]
          - id: d
            sleep: 1s
            after: [c]
          - id: e
            sleep: 1s
            after: []
        """
    )
    assert [(step.id, step.after, step.explicit_after) for step in ir.steps] == [
        ("a", (), False),
        ("b", (), True),
        ("c", ("b", "a"), True),
        ("d", ("c",), True),
        ("e", (), True),
    ]


def test_a_step_may_read_what_runs_before_it_transitively() -> None:
    ir = compile_ir(
        """\
        tasks:
          t: {version: "1"}
        steps:
          - id: a
            task: t
          - id: b
            task: t
          - id: c
            task: t
            input: {first: "${ steps.a.output }", second: "${ steps.b.status }"}
        """
    )
    assert call_step(ir, "c").call.input == {
        "first": "${ steps.a.output }",
        "second": "${ steps.b.status }",
    }


def test_continue_on_error() -> None:
    ir = compile_ir(
        """\
        tasks:
          t: {version: "1"}
        signals:
          go: {}
        steps:
          - id: a
            task: t
            continue_on_error: true
          - id: b
            await: go
            continue_on_error: true
          - id: c
            task: t
            continue_on_error: false
          - id: d
            task: t
        """
    )
    assert [step.continue_on_error for step in ir.steps] == [True, True, False, False]


# -- retry, defaults and timeouts --------------------------------------------


def test_orbit_retry_defaults() -> None:
    ir = compile_ir(
        """\
        tasks:
          t: {version: "1"}
        steps:
          - id: a
            task: t
        """
    )
    assert call_step(ir, "a").call == TaskCall(
        task="t",
        retry=RetryPolicy(
            max_attempts=3,
            initial_interval_ms=1_000,
            backoff=2.0,
            max_interval_ms=100_000,
            non_retryable=(),
        ),
        timeouts=Timeouts(),
    )


def test_defaults_apply_field_by_field() -> None:
    ir = compile_ir(
        """\
        tasks:
          t: {version: "1"}
        defaults:
          timeout: 5m
          schedule_timeout: 1m
          heartbeat_timeout: 20s
          retry: {max_attempts: 3, initial_interval: 1s, backoff: 2.0, max_interval: 1m}
        steps:
          - id: plain
            task: t
          - id: own
            task: t
            timeout: 30s
            retry: {max_attempts: 5, non_retryable: [OUT_OF_STOCK]}
        """
    )
    assert call_step(ir, "plain").call.retry == RetryPolicy(
        max_attempts=3, initial_interval_ms=1_000, backoff=2.0, max_interval_ms=60_000
    )
    assert call_step(ir, "plain").call.timeouts == Timeouts(
        attempt_ms=300_000, schedule_ms=60_000, heartbeat_ms=20_000
    )
    own = call_step(ir, "own").call
    assert own.retry == RetryPolicy(
        max_attempts=5,
        initial_interval_ms=1_000,
        backoff=2.0,
        max_interval_ms=60_000,
        non_retryable=("OUT_OF_STOCK",),
    )
    assert own.timeouts == Timeouts(attempt_ms=30_000, schedule_ms=60_000, heartbeat_ms=20_000)


def test_a_step_overriding_max_attempts_keeps_the_default_initial_interval() -> None:
    ir = compile_ir(
        """\
        tasks:
          t: {version: "1"}
        defaults:
          retry: {initial_interval: 250ms, backoff: 1.5}
        steps:
          - id: a
            task: t
            retry: {max_attempts: 7}
        """
    )
    assert call_step(ir, "a").call.retry == RetryPolicy(
        max_attempts=7, initial_interval_ms=250, backoff=1.5, max_interval_ms=25_000
    )


def test_max_interval_defaults_to_100_times_the_initial_interval() -> None:
    ir = compile_ir(
        """\
        tasks:
          t: {version: "1"}
        defaults:
          retry: {initial_interval: 2s}
        steps:
          - id: inherited
            task: t
          - id: own
            task: t
            retry: {initial_interval: 30s}
          - id: capped
            task: t
            retry: {max_interval: 2s}
        """
    )
    assert call_step(ir, "inherited").call.retry.max_interval_ms == 200_000
    assert call_step(ir, "own").call.retry.initial_interval_ms == 30_000
    assert call_step(ir, "own").call.retry.max_interval_ms == 3_000_000
    assert call_step(ir, "capped").call.retry.initial_interval_ms == 2_000
    assert call_step(ir, "capped").call.retry.max_interval_ms == 2_000


def test_a_backoff_written_as_an_integer_is_a_float() -> None:
    ir = compile_ir(
        """\
        tasks:
          t: {version: "1"}
        steps:
          - id: a
            task: t
            retry: {backoff: 3, max_attempts: 1}
        """
    )
    retry = call_step(ir, "a").call.retry
    assert retry.backoff == 3.0
    assert isinstance(retry.backoff, float)
    assert retry.max_attempts == 1


def test_non_retryable_is_sorted_and_deduplicated() -> None:
    ir = compile_ir(
        """\
        tasks:
          t: {version: "1"}
        defaults:
          retry: {non_retryable: [Z, A]}
        steps:
          - id: a
            task: t
            retry: {non_retryable: [OUT_OF_STOCK, CARD_DECLINED, OUT_OF_STOCK]}
          - id: b
            task: t
          - id: c
            task: t
            retry: {non_retryable: []}
        """
    )
    assert call_step(ir, "a").call.retry.non_retryable == ("CARD_DECLINED", "OUT_OF_STOCK")
    assert call_step(ir, "b").call.retry.non_retryable == ("A", "Z")
    assert call_step(ir, "c").call.retry.non_retryable == ()


def test_the_four_timeouts() -> None:
    ir = compile_ir(
        """\
        timeout: 1d
        tasks:
          t: {version: "1"}
        steps:
          - id: a
            task: t
            timeout: PT30S
            schedule_timeout: 10m
            heartbeat_timeout: 5s
        """
    )
    assert ir.timeout_ms == 86_400_000
    assert call_step(ir, "a").call.timeouts == Timeouts(
        attempt_ms=30_000, schedule_ms=600_000, heartbeat_ms=5_000
    )


def test_compensate() -> None:
    ir = compile_ir(
        """\
        tasks:
          reserve-stock: {version: "1"}
          release-stock: {version: "1"}
        defaults:
          timeout: 5m
          retry: {max_attempts: 4}
        steps:
          - id: reserve
            task: reserve-stock
            retry: {max_attempts: 9}
            compensate:
              task: release-stock
              input:
                reservation: ${ steps.reserve.output.id }
                attempt: ${ execution.attempt }
              heartbeat_timeout: 15s
              retry: {initial_interval: 3s}
        """
    )
    step = call_step(ir, "reserve")
    assert step.compensate == Compensation(
        call=TaskCall(
            task="release-stock",
            input={
                "reservation": "${ steps.reserve.output.id }",
                "attempt": "${ execution.attempt }",
            },
            retry=RetryPolicy(max_attempts=4, initial_interval_ms=3_000, max_interval_ms=300_000),
            timeouts=Timeouts(attempt_ms=300_000, heartbeat_ms=15_000),
        )
    )
    assert step.call.retry.max_attempts == 9


def test_compensate_may_read_steps_that_run_later() -> None:
    ir = compile_ir(
        """\
        tasks:
          t: {version: "1"}
        steps:
          - id: a
            task: t
            compensate:
              task: t
              input: ${ steps.b.output }
          - id: b
            task: t
        """
    )
    compensate = call_step(ir, "a").compensate
    assert compensate is not None
    assert compensate.call.input == "${ steps.b.output }"


# -- finally and output ------------------------------------------------------


def test_finally_steps() -> None:
    ir = compile_ir(
        """\
        tasks:
          t: {version: "1"}
          release-lock: {version: "1"}
        defaults:
          timeout: 1m
        steps:
          - id: a
            task: t
        finally:
          - id: unlock
            task: release-lock
            input:
              order: ${ input.order_id }
              result: ${ steps.a.output }
          - id: notify
            http: {method: POST, url: "https://example.com/done"}
        """
    )
    assert [step.id for step in ir.steps] == ["a"]
    assert [step.id for step in ir.finally_steps] == ["unlock", "notify"]
    unlock, notify = ir.finally_steps
    assert unlock.kind == "task"
    assert unlock.after == ()
    assert unlock.explicit_after is False
    assert unlock.call.input == {"order": "${ input.order_id }", "result": "${ steps.a.output }"}
    assert unlock.call.timeouts == Timeouts(attempt_ms=60_000)
    assert notify.kind == "http"
    assert notify.after == ("unlock",)
    assert notify.call.input == {"method": "POST", "url": "https://example.com/done"}
    assert ir.step("notify") is notify
    assert ir.output == "${ steps.a.output }"


def test_finally_steps_may_read_earlier_finally_steps() -> None:
    ir = compile_ir(
        """\
        tasks:
          t: {version: "1"}
        steps:
          - id: a
            task: t
        finally:
          - id: first
            task: t
          - id: second
            task: t
            after: [first]
            input: ${ steps.first.status }
        """
    )
    second = ir.finally_steps[1]
    assert second.after == ("first",)
    assert second.explicit_after is True
    assert second.call.input == "${ steps.first.status }"


def test_output_defaults_to_the_output_of_the_last_step() -> None:
    ir = compile_ir(
        """\
        steps:
          - id: a
            sleep: 1s
          - id: last_one
            sleep: 1s
        """
    )
    assert ir.output == "${ steps.last_one.output }"


def test_output_default_for_an_id_with_a_hyphen() -> None:
    ir = compile_ir(
        """\
        steps:
          - id: cool-down
            sleep: 1s
        """
    )
    assert ir.output == '${ steps["cool-down"].output }'


def test_output_default_is_the_last_step_even_when_it_runs_in_parallel() -> None:
    ir = compile_ir(
        """\
        steps:
          - id: a
            sleep: 1s
          - id: b
            sleep: 1s
            after: []
        """
    )
    assert ir.output == "${ steps.b.output }"


def test_explicit_output() -> None:
    ir = compile_ir(
        """\
        tasks:
          t: {version: "1"}
        steps:
          - id: ship
            task: t
        output:
          shipped: ${ size(steps.ship.output) }
          constant: 42
          list: ["${ input.a }", b]
        """
    )
    assert ir.output == {
        "shipped": "${ size(steps.ship.output) }",
        "constant": 42,
        "list": ["${ input.a }", "b"],
    }


def test_explicit_null_output() -> None:
    ir = compile_ir(
        """\
        steps:
          - id: a
            sleep: 1s
        output: null
        """
    )
    assert ir.output is None


def test_output_may_read_every_step() -> None:
    ir = compile_ir(
        """\
        steps:
          - id: a
            sleep: 1s
          - id: b
            sleep: 1s
            after: []
        output: ["${ steps.a.status }", "${ steps['b'].status }"]
        """
    )
    assert ir.output == ["${ steps.a.status }", "${ steps['b'].status }"]


# -- expressions and YAML ----------------------------------------------------


@pytest.mark.parametrize(
    "written",
    ["${input.x}", "${ input.x }", "${   input.x   }", "'${\tinput.x }'", '"${ input.x\\n}"'],
)
def test_expressions_are_spelled_canonically(written: str) -> None:
    ir = compile_ir(
        f"""\
        tasks:
          t: {{version: "1"}}
        steps:
          - id: a
            task: t
            if: {written.replace("input.x", "input.go")}
            for: {written.replace("input.x", "input.list")}
            input:
              v: {written}
        output: {written}
        queries:
          q: {written}
        """
    )
    step = call_step(ir, "a")
    assert step.when == "${ input.go }"
    assert step.for_each == "${ input.list }"
    assert step.call.input == {"v": "${ input.x }"}
    assert ir.output == "${ input.x }"
    assert ir.queries == {"q": "${ input.x }"}


def test_inner_spacing_of_an_expression_is_kept() -> None:
    ir = compile_ir(
        """\
        tasks:
          t: {version: "1"}
        steps:
          - id: a
            task: t
            input: ${  input.a  +   input.b }
        """
    )
    assert call_step(ir, "a").call.input == "${ input.a  +   input.b }"


def test_spacing_comments_and_key_order_do_not_change_the_hash() -> None:
    one = compile_definition(
        dedent(
            """\
            orbit: 1
            workflow: wf
            version: 1.0.0
            tasks:
              t: {version: "1"}
            steps:
              - id: a
                task: t
                input: {x: "${input.x}", y: 2}
            """
        )
    )
    other = compile_definition(
        dedent(
            """\
            # the same workflow, written differently
            version: "1.0.0"
            workflow: wf
            orbit: 1
            steps:
              - task: t
                id: a
                input:
                  y: 2
                  x: ${   input.x }
            tasks:
              t:
                version: 1
            """
        )
    )
    assert one.ir == other.ir
    assert one.hash == other.hash


def test_yaml_1_2_scalars_stay_strings() -> None:
    ir = compile_ir(
        """\
        tasks:
          t: {version: "1"}
        steps:
          - id: a
            task: t
            input:
              answer: no
              switch: on
              agree: yes
              duration: 1:30
              date: 2026-01-01
              octal: 0o17
              hex: 0x1f
              padded: 007
              exponent: 1e3
              yes_bool: true
              nothing: ~
        """
    )
    assert call_step(ir, "a").call.input == {
        "answer": "no",
        "switch": "on",
        "agree": "yes",
        "duration": "1:30",
        "date": "2026-01-01",
        "octal": 15,
        "hex": 31,
        "padded": 7,
        "exponent": 1000.0,
        "yes_bool": True,
        "nothing": None,
    }


def test_merge_keys() -> None:
    ir = compile_ir(
        """\
        tasks:
          t: {version: "1"}
        steps:
          - &base
            id: a
            task: t
            retry: {max_attempts: 2}
            input: &payload
              order: ${ input.order_id }
              kind: base
          - <<: *base
            id: b
            input:
              <<: *payload
              kind: override
        """
    )
    a, b = call_step(ir, "a"), call_step(ir, "b")
    assert b.call.task == "t"
    assert b.call.retry == a.call.retry == RetryPolicy(max_attempts=2)
    assert b.after == ("a",)
    assert a.call.input == {"order": "${ input.order_id }", "kind": "base"}
    assert b.call.input == {"order": "${ input.order_id }", "kind": "override"}


# -- the IR as JSON ----------------------------------------------------------


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda path: path.name)
def test_ir_round_trips_through_canonical_json(path: Path) -> None:
    definition = compile_definition(path.read_text(encoding="utf-8"), path.name)
    from_text = definition_from_ir(definition.ir.canonical_json())
    assert from_text.ir == definition.ir
    assert from_text.hash == definition.hash
    from_bytes = definition_from_ir(definition.ir.canonical_json().encode())
    assert from_bytes.ir == definition.ir
    from_data = definition_from_ir(definition.ir.to_json_data())
    assert from_data.ir == definition.ir
    assert from_data.hash == definition.hash


def test_ir_of_every_construct_round_trips() -> None:
    ir = compile_ir(
        """\
        timeout: 2h
        signals: {go: {type: object}, any: }
        queries: {q: "${ steps.a.status }"}
        tasks:
          t: {version: "1", input: {type: object}}
        defaults:
          retry: {max_attempts: 4, non_retryable: [B, A]}
        steps:
          - id: a
            task: t
            for: [1, 2]
            concurrency: 1
            input: {v: "${ item }", n: null}
            compensate: {task: t, input: "${ steps.a.output }"}
            continue_on_error: true
          - id: w
            await: go
            timeout: 1h
            if: false
          - id: s
            sleep: 1s
            after: []
          - id: c
            workflow: child@1.0.0
            after: [a, w]
          - id: h
            http: {method: PUT, url: "https://x", body: null, headers: {}}
        finally:
          - id: f
            task: t
        output: null
        """
    )
    again = definition_from_ir(ir.canonical_json())
    assert again.ir == ir
    assert again.hash == ir.definition_hash()


def test_the_child_hash_is_not_part_of_the_definition_hash() -> None:
    ir = compile_ir(
        """\
        steps:
          - id: invoice
            workflow: send-invoice@1.0.0
        """
    )
    data = ir.to_json_data()
    data["steps"][0]["child"]["hash"] = "sha256:" + "0" * 64
    pinned = definition_from_ir(data)
    assert pinned.ir != ir
    assert call_step(pinned.ir, "invoice").child == ChildRef(
        name="send-invoice", version="1.0.0", hash="sha256:" + "0" * 64
    )
    assert pinned.hash == ir.definition_hash()


def test_an_invalid_ir_dict_is_a_definition_error() -> None:
    with pytest.raises(DefinitionError) as caught:
        definition_from_ir({"name": "wf"})
    assert [str(problem) for problem in caught.value.problems] == [
        "<ir>: steps: field required",
        "<ir>: version: field required",
    ]
    assert all(problem.line is None for problem in caught.value.problems)


@pytest.mark.parametrize(
    ("data", "expected"),
    [
        (
            {"name": "wf", "version": "1.0.0", "steps": [], "extra": 1},
            "<ir>: extra: extra inputs are not permitted",
        ),
        (
            {"name": "wf", "version": "1.0.0", "steps": [{"id": "a", "kind": "jump"}]},
            "<ir>: steps[0].kind: 'jump' is not one of"
            " 'task', 'http', 'workflow', 'await', 'sleep'",
        ),
        (
            {
                "name": "wf",
                "version": "1.0.0",
                "steps": [{"id": "a", "kind": "sleep", "duration_ms": 0}],
            },
            # The path has no union tag (steps[0].sleep.duration_ms): the IR has no such key.
            "<ir>: steps[0].duration_ms: must be at least 1",
        ),
        (
            {
                "name": "wf",
                "version": "1.0.0",
                "steps": [{"id": "a", "kind": "workflow", "call": {"task": "workflow:x"}}],
            },
            "<ir>: steps[0]: a child reference belongs to workflow steps, and they need one",
        ),
        (
            {"ir_version": 2, "name": "wf", "version": "1.0.0", "steps": []},
            "<ir>: ir_version: expected 1",
        ),
    ],
)
def test_an_ir_that_does_not_validate(data: dict[str, Any], expected: str) -> None:
    with pytest.raises(DefinitionError) as caught:
        definition_from_ir(data)
    assert [str(problem) for problem in caught.value.problems] == [expected]


def test_an_ir_that_is_not_json() -> None:
    with pytest.raises(DefinitionError) as caught:
        definition_from_ir("not json", "upload.json")
    assert [str(problem) for problem in caught.value.problems] == [
        "upload.json: invalid JSON: expected ident at line 1 column 2"
    ]


def test_an_ir_goes_through_the_checks_of_meaning() -> None:
    data = {
        "name": "wf",
        "version": "1.0.0",
        "steps": [
            {"id": "a", "kind": "await", "signal": "go"},
            {"id": "b", "kind": "sleep", "duration_ms": 5, "after": ["a", "zz"]},
            {"id": "c", "kind": "task", "call": {"task": "t", "input": "${ steps.q.output }"}},
        ],
    }
    with pytest.raises(DefinitionError) as caught:
        definition_from_ir(data)
    assert [str(problem) for problem in caught.value.problems] == [
        "<ir>: steps[0].await: undeclared signal 'go'",
        "<ir>: steps[1].after[1]: undeclared step 'zz' among the steps",
        "<ir>: steps[2].input: undeclared step 'q'",
        "<ir>: steps[2].task: undeclared task 't'; declare it under tasks",
    ]


_VALID_SLEEP = [{"id": "a", "kind": "sleep", "duration_ms": 5}]


@pytest.mark.parametrize(
    ("data", "expected"),
    [
        pytest.param(
            {"name": "Bad Name", "version": "1.0.0", "steps": _VALID_SLEEP},
            "'Bad Name' is not a workflow name: use lowercase letters, digits, - _ ."
            " (at most 100, starting with a letter or digit)",
            id="name",
        ),
        pytest.param(
            {"name": "wf", "version": "one", "steps": _VALID_SLEEP},
            "'one' is not a semantic version such as 1.0.0",
            id="version",
        ),
        pytest.param(
            {"name": "wf", "version": "1.0.0", "steps": [{**_VALID_SLEEP[0], "id": "9 a"}]},
            "'9 a' is not a valid step id: use a letter, then letters, digits, - or _"
            " (at most 100)",
            id="step-id",
        ),
        pytest.param(
            {
                "name": "wf",
                "version": "1.0.0",
                "input_schema": {"type": "strin"},
                "steps": _VALID_SLEEP,
            },
            "not a valid JSON Schema (2020-12):"
            " 'strin' is not valid under any of the given schemas",
            id="schema",
        ),
        pytest.param(
            {
                "name": "wf",
                "version": "1.0.0",
                "queries": {"q": "not an expression"},
                "steps": _VALID_SLEEP,
            },
            "must be an expression written ${ … }",
            id="query",
        ),
        pytest.param(
            {
                "name": "wf",
                "version": "1.0.0",
                "tasks": {"t": {"version": "1"}},
                "steps": [
                    {
                        "id": "a",
                        "kind": "task",
                        "call": {
                            "task": "t",
                            "retry": {"initial_interval_ms": 1000, "max_interval_ms": 1},
                        },
                    }
                ],
            },
            "max_interval_ms must not be shorter than initial_interval_ms",
            id="retry",
        ),
        pytest.param(
            {
                "name": "wf",
                "version": "1.0.0",
                "steps": [
                    {
                        "id": "a",
                        "kind": "workflow",
                        "child": {"name": "x", "version": "1.0.0"},
                        "call": {"task": "workflow:y"},
                    }
                ],
            },
            "a workflow step calls workflow:x",
            id="child-task",
        ),
    ],
)
def test_an_ir_is_checked_like_a_compiled_file(data: dict[str, Any], expected: str) -> None:
    # definition_from_ir runs the checks of names, versions, schemas, queries
    # and retry policies that a compiled file gets. Only what is wrong is
    # pinned here: the checks name places in the terms of the YAML.
    with pytest.raises(DefinitionError) as caught:
        definition_from_ir(data)
    assert [problem.message for problem in caught.value.problems] == [expected]
    assert all(problem.line is None for problem in caught.value.problems)
