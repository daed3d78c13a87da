"""Every compile error, as the user reads it: ``FILE:LINE: path: message``.

Each test compiles a small file and asserts the full list of rendered
problems, so a wrong line, a wrong path, a changed wording or an extra
(spurious) problem all fail the test.
"""

from pathlib import Path
from textwrap import dedent

import pytest

from orbit_model import DefinitionError, ErrorCode, Problem, compile_definition

EXAMPLES = Path(__file__).parents[2] / "examples"


def problems(text: str) -> list[str]:
    """The rendered problems of compiling ``text`` as ``wf.yaml``."""
    with pytest.raises(DefinitionError) as caught:
        compile_definition(text, "wf.yaml")
    return [str(problem) for problem in caught.value.problems]


def yaml(text: str) -> str:
    return dedent(text)


# -- the problem itself ------------------------------------------------------


def test_a_problem_carries_file_line_path_and_message() -> None:
    text = yaml(
        """\
        orbit: 1
        workflow: wf
        version: 1.0.0
        signals:
          approval: {}
        tasks:
          charge: {version: "1"}
        steps:
          - id: approval
            await: approval
          - id: charge
            if: ${ signals.aproval.approved }
            task: charge
        """
    )
    with pytest.raises(DefinitionError) as caught:
        compile_definition(text, "order.yaml")
    error = caught.value
    assert error.problems == (
        Problem(
            "order.yaml",
            12,
            "steps[1].if",
            "undeclared signal 'aproval' (did you mean 'approval'?)",
        ),
    )
    assert error.code is ErrorCode.INVALID_DEFINITION
    assert error.http_status == 400
    assert error.message == (
        "order.yaml:12: steps[1].if: undeclared signal 'aproval' (did you mean 'approval'?)"
    )


def test_a_problem_without_a_path_renders_without_one() -> None:
    assert str(Problem("wf.yaml", 3, "", "something")) == "wf.yaml:3: something"
    assert str(Problem("<ir>", None, "steps", "something")) == "<ir>: steps: something"


# -- YAML --------------------------------------------------------------------


def test_yaml_syntax_error() -> None:
    text = yaml(
        """\
        orbit: 1
        workflow: wf
        version: 1.0.0
        steps:
          - id: a
           sleep: 1s
        """
    )
    assert problems(text) == [
        "wf.yaml:6: not valid YAML: did not find expected '-' indicator"
        " (while parsing a block collection that starts on line 5)"
    ]


def test_yaml_syntax_error_at_the_end_of_the_text_points_at_the_last_line() -> None:
    # The parser places the end of the text on the line after the last (5);
    # neither the problem nor its "(while parsing … that starts on line N)"
    # context may point at a line the file does not have. Here the context
    # would be on the problem's own line, so it is left out.
    text = yaml(
        """\
        orbit: 1
        workflow: wf
        version: 1.0.0
        steps: [
        """
    )
    assert problems(text) == ["wf.yaml:4: not valid YAML: did not find expected node content"]


def test_yaml_tab_indentation() -> None:
    text = "orbit: 1\nworkflow: wf\nversion: 1.0.0\nsteps:\n\t- id: a\n"
    assert problems(text) == [
        "wf.yaml:5: not valid YAML: found character that cannot start any token"
    ]


def test_yaml_unterminated_quote() -> None:
    text = yaml(
        """\
        orbit: 1
        workflow: wf
        version: 1.0.0
        description: 'abc
        steps: []
        """
    )
    assert problems(text) == [
        "wf.yaml:5: not valid YAML: found unexpected end of stream"
        " (while scanning a quoted scalar that starts on line 4)"
    ]


def test_duplicate_key() -> None:
    text = yaml(
        """\
        orbit: 1
        workflow: wf
        version: 1.0.0
        workflow: wf2
        steps: []
        """
    )
    assert problems(text) == ["wf.yaml:4: workflow: duplicate key 'workflow'"]


def test_duplicate_key_in_a_step() -> None:
    text = yaml(
        """\
        orbit: 1
        workflow: wf
        version: 1.0.0
        tasks:
          t: {version: "1"}
        steps:
          - id: a
            task: t
            task: t
        """
    )
    assert problems(text) == ["wf.yaml:9: steps[0].task: duplicate key 'task'"]


def test_duplicate_key_after_a_merge_is_still_a_duplicate() -> None:
    text = yaml(
        """\
        orbit: 1
        workflow: wf
        version: 1.0.0
        tasks:
          t: {version: "1"}
        steps:
          - &first
            id: a
            task: t
          - <<: *first
            id: b
            id: c
        """
    )
    assert problems(text) == ["wf.yaml:12: steps[1].id: duplicate key 'id'"]


def test_non_string_key() -> None:
    text = yaml(
        """\
        orbit: 1
        workflow: wf
        version: 1.0.0
        1: one
        steps: []
        """
    )
    assert problems(text) == [
        "wf.yaml:4: mapping keys must be strings (quote the key to make it one)"
    ]


@pytest.mark.parametrize("text", ["", "\n", "# only a comment\n"])
def test_empty_file(text: str) -> None:
    assert problems(text) == ["wf.yaml:1: the file holds no YAML document"]


def test_multiple_documents() -> None:
    text = yaml(
        """\
        orbit: 1
        workflow: wf
        version: 1.0.0
        ---
        orbit: 1
        """
    )
    assert problems(text) == ["wf.yaml:5: only one YAML document per file is allowed"]


def test_unsupported_tag() -> None:
    text = yaml(
        """\
        orbit: 1
        workflow: wf
        version: 1.0.0
        description: !secret vault/key
        steps: []
        """
    )
    assert problems(text) == ["wf.yaml:4: description: unsupported YAML tag '!secret'"]


@pytest.mark.parametrize("value", [".nan", ".inf", "-.inf"])
def test_nan_and_infinity(value: str) -> None:
    text = yaml(
        f"""\
        orbit: 1
        workflow: wf
        version: 1.0.0
        steps:
          - id: a
            sleep: 1s
        output:
          ratio: {value}
        """
    )
    assert problems(text) == [f"wf.yaml:8: output.ratio: {value} is not a JSON number"]


def test_recursive_alias() -> None:
    text = yaml(
        """\
        orbit: 1
        workflow: wf
        version: 1.0.0
        output: &loop [*loop]
        """
    )
    assert problems(text) == ["wf.yaml:4: output[0]: an alias refers to itself"]


@pytest.mark.parametrize("text", ["- a\n- b\n", "hello\n", "42\n"])
def test_the_document_must_be_a_mapping(text: str) -> None:
    assert problems(text) == ["wf.yaml:1: a workflow file must be a mapping of keys"]


@pytest.mark.parametrize("text", ["---\n", "~\n", "--- ~\n", "null\n"])
def test_a_document_that_is_null_holds_no_workflow(text: str) -> None:
    assert problems(text) == ["wf.yaml:1: the file holds no workflow"]


# -- structure: keys ---------------------------------------------------------


def test_unknown_top_level_key_with_did_you_mean() -> None:
    text = yaml(
        """\
        orbit: 1
        workflow: wf
        version: 1.0.0
        descripton: Greets.
        steps:
          - id: a
            sleep: 1s
        """
    )
    assert problems(text) == [
        "wf.yaml:4: descripton: unknown key 'descripton' (did you mean 'description'?)"
    ]


def test_unknown_key_without_a_close_match() -> None:
    text = yaml(
        """\
        orbit: 1
        workflow: wf
        version: 1.0.0
        zzz: 1
        steps:
          - id: a
            sleep: 1s
        """
    )
    assert problems(text) == ["wf.yaml:4: zzz: unknown key 'zzz'"]


def test_unknown_key_in_a_step() -> None:
    text = yaml(
        """\
        orbit: 1
        workflow: wf
        version: 1.0.0
        tasks:
          t: {version: "1"}
        steps:
          - id: a
            task: t
            inptu: {x: 1}
        """
    )
    assert problems(text) == [
        "wf.yaml:9: steps[0].inptu: unknown key 'inptu' (did you mean 'input'?)"
    ]


def test_unknown_key_in_retry() -> None:
    text = yaml(
        """\
        orbit: 1
        workflow: wf
        version: 1.0.0
        tasks:
          t: {version: "1"}
        steps:
          - id: a
            task: t
            retry:
              max_attempt: 2
        """
    )
    assert problems(text) == [
        "wf.yaml:10: steps[0].retry.max_attempt: unknown key 'max_attempt'"
        " (did you mean 'max_attempts'?)"
    ]


def test_unknown_key_in_http() -> None:
    text = yaml(
        """\
        orbit: 1
        workflow: wf
        version: 1.0.0
        steps:
          - id: a
            http:
              url: https://example.com
              header: {accept: text/plain}
        """
    )
    assert problems(text) == [
        "wf.yaml:8: steps[0].http.header: unknown key 'header' (did you mean 'headers'?)"
    ]


def test_unknown_key_in_a_task_contract() -> None:
    text = yaml(
        """\
        orbit: 1
        workflow: wf
        version: 1.0.0
        tasks:
          t:
            version: "1"
            inputs: {type: object}
        steps:
          - id: a
            task: t
        """
    )
    assert problems(text) == [
        "wf.yaml:7: tasks.t.inputs: unknown key 'inputs' (did you mean 'input'?)"
    ]


def test_unknown_key_in_defaults() -> None:
    text = yaml(
        """\
        orbit: 1
        workflow: wf
        version: 1.0.0
        defaults:
          retyr: {max_attempts: 2}
        steps:
          - id: a
            sleep: 1s
        """
    )
    assert problems(text) == [
        "wf.yaml:5: defaults.retyr: unknown key 'retyr' (did you mean 'retry'?)"
    ]


def test_unknown_key_in_compensate_retry() -> None:
    text = yaml(
        """\
        orbit: 1
        workflow: wf
        version: 1.0.0
        tasks:
          t: {version: "1"}
        steps:
          - id: a
            task: t
            compensate:
              task: t
              retry: {backof: 2}
        """
    )
    assert problems(text) == [
        "wf.yaml:11: steps[0].compensate.retry.backof: unknown key 'backof'"
        " (did you mean 'backoff'?)"
    ]


def test_step_without_id() -> None:
    text = yaml(
        """\
        orbit: 1
        workflow: wf
        version: 1.0.0
        steps:
          - sleep: 1s
        """
    )
    assert problems(text) == ["wf.yaml:5: steps[0].id: missing required key 'id'"]


def test_workflow_without_steps() -> None:
    text = yaml(
        """\
        orbit: 1
        workflow: wf
        version: 1.0.0
        description: Does nothing.
        """
    )
    assert problems(text) == ["wf.yaml:1: steps: missing required key 'steps'"]


def test_workflow_with_an_empty_list_of_steps() -> None:
    text = yaml(
        """\
        orbit: 1
        workflow: wf
        version: 1.0.0
        steps: []
        """
    )
    assert problems(text) == ["wf.yaml:4: steps: needs at least 1"]


def test_missing_required_keys_in_nested_mappings() -> None:
    text = yaml(
        """\
        orbit: 1
        workflow: wf
        version: 1.0.0
        tasks:
          t: {input: {type: object}}
        steps:
          - id: a
            http: {method: GET}
          - id: b
            task: t
            compensate:
              input: {}
        """
    )
    assert problems(text) == [
        "wf.yaml:5: tasks.t.version: missing required key 'version'",
        "wf.yaml:8: steps[0].http.url: missing required key 'url'",
        "wf.yaml:11: steps[1].compensate.task: missing required key 'task'",
    ]


def test_mapping_with_none_of_the_required_keys() -> None:
    text = yaml(
        """\
        # not a workflow at all
        base:
          x: 1
        """
    )
    assert problems(text) == [
        "wf.yaml:2: base: unknown key 'base'",
        "wf.yaml:2: orbit: missing required key 'orbit'",
        "wf.yaml:2: steps: missing required key 'steps'",
        "wf.yaml:2: version: missing required key 'version'",
        "wf.yaml:2: workflow: missing required key 'workflow'",
    ]


# -- structure: types --------------------------------------------------------


def test_wrong_type_string() -> None:
    text = yaml(
        """\
        orbit: 1
        workflow: wf
        version: 1.0.0
        description: 3
        steps:
          - id: a
            sleep: 1s
        """
    )
    assert problems(text) == ["wf.yaml:4: description: expected a string"]


def test_wrong_type_integer_is_not_converted_from_a_string() -> None:
    text = yaml(
        """\
        orbit: "1"
        workflow: wf
        version: 1.0.0
        tasks:
          t: {version: "1"}
        steps:
          - id: a
            task: t
            retry: {max_attempts: "3"}
        """
    )
    assert problems(text) == [
        "wf.yaml:1: orbit: expected an integer",
        "wf.yaml:9: steps[0].retry.max_attempts: expected an integer",
    ]


def test_wrong_type_list_and_boolean() -> None:
    text = yaml(
        """\
        orbit: 1
        workflow: wf
        version: 1.0.0
        tasks:
          t: {version: "1"}
        steps:
          - id: a
            task: t
            after: a
            continue_on_error: yes
        """
    )
    assert problems(text) == [
        "wf.yaml:9: steps[0].after: expected a list",
        "wf.yaml:10: steps[0].continue_on_error: expected true or false",
    ]


def test_wrong_type_mapping() -> None:
    text = yaml(
        """\
        orbit: 1
        workflow: wf
        version: 1.0.0
        steps:
          - id: a
            http: https://example.com
        """
    )
    assert problems(text) == ["wf.yaml:6: steps[0].http: expected a mapping"]


def test_steps_must_be_a_list() -> None:
    text = yaml(
        """\
        orbit: 1
        workflow: wf
        version: 1.0.0
        steps:
          id: a
        """
    )
    assert problems(text) == ["wf.yaml:4: steps: expected a list"]


# -- structure: durations ----------------------------------------------------


def test_duration_without_a_unit() -> None:
    text = yaml(
        """\
        orbit: 1
        workflow: wf
        version: 1.0.0
        timeout: 30
        steps:
          - id: a
            sleep: 1s
        """
    )
    assert problems(text) == ["wf.yaml:4: timeout: 30 has no unit; write it as 30s, 30ms, 30m, …"]


def test_duration_without_a_unit_in_retry() -> None:
    text = yaml(
        """\
        orbit: 1
        workflow: wf
        version: 1.0.0
        tasks:
          t: {version: "1"}
        steps:
          - id: a
            task: t
            retry: {initial_interval: 5}
        """
    )
    assert problems(text) == [
        "wf.yaml:9: steps[0].retry.initial_interval: 5 has no unit; write it as 5s, 5ms, 5m, …"
    ]


@pytest.mark.parametrize("value", ["soon", "P1Y", "10 minutes", "${ input.delay }"])
def test_duration_that_is_not_a_duration(value: str) -> None:
    text = yaml(
        f"""\
        orbit: 1
        workflow: wf
        version: 1.0.0
        steps:
          - id: a
            sleep: {value}
        """
    )
    assert problems(text) == [
        "wf.yaml:6: steps[0].sleep: expected a duration such as 250ms, 30s, 5m, 2h, 1d,"
        f" 1h30m or PT30S, got {value!r}"
    ]


@pytest.mark.parametrize("value", ["0s", "0ms", "PT0S"])
def test_duration_of_zero(value: str) -> None:
    text = yaml(
        f"""\
        orbit: 1
        workflow: wf
        version: 1.0.0
        signals:
          go: {{}}
        steps:
          - id: a
            await: go
            timeout: {value}
        """
    )
    assert problems(text) == [f"wf.yaml:9: steps[0].timeout: {value!r} must be longer than zero"]


def test_duration_finer_than_a_millisecond() -> None:
    text = yaml(
        """\
        orbit: 1
        workflow: wf
        version: 1.0.0
        steps:
          - id: a
            sleep: 0.5ms
        """
    )
    assert problems(text) == [
        "wf.yaml:6: steps[0].sleep: '0.5ms' is not a whole number of milliseconds"
    ]


# -- names and versions ------------------------------------------------------


def test_unquoted_float_version() -> None:
    text = yaml(
        """\
        orbit: 1
        workflow: wf
        version: 1.5
        steps:
          - id: a
            sleep: 1s
        """
    )
    assert problems(text) == [
        "wf.yaml:3: version: YAML reads this version as the number 1.5; quote it"
    ]


def test_unquoted_float_version_loses_its_trailing_zero() -> None:
    # YAML reads 1.10 as the number 1.1, and the message can only show that.
    text = yaml(
        """\
        orbit: 1
        workflow: wf
        version: 1.10
        steps:
          - id: a
            sleep: 1s
        """
    )
    assert problems(text) == [
        "wf.yaml:3: version: YAML reads this version as the number 1.1; quote it"
    ]


def test_unquoted_float_contract_version() -> None:
    text = yaml(
        """\
        orbit: 1
        workflow: wf
        version: 1.0.0
        tasks:
          t: {version: 1.0}
        steps:
          - id: a
            task: t
        """
    )
    assert problems(text) == [
        "wf.yaml:5: tasks.t.version: YAML reads this version as the number 1.0; quote it"
    ]


@pytest.mark.parametrize("name", ["Order", "order flow", "-order", "ordér"])
def test_bad_workflow_name(name: str) -> None:
    text = yaml(
        f"""\
        orbit: 1
        workflow: {name}
        version: 1.0.0
        steps:
          - id: a
            sleep: 1s
        """
    )
    assert problems(text) == [
        f"wf.yaml:2: workflow: {name!r} is not a workflow name: use lowercase letters, digits,"
        " - _ . (at most 100, starting with a letter or digit)"
    ]


def test_workflow_name_longer_than_100() -> None:
    name = "a" * 101
    text = f"orbit: 1\nworkflow: {name}\nversion: 1.0.0\nsteps:\n  - id: a\n    sleep: 1s\n"
    assert problems(text) == [
        f"wf.yaml:2: workflow: {name!r} is not a workflow name: use lowercase letters, digits,"
        " - _ . (at most 100, starting with a letter or digit)"
    ]


@pytest.mark.parametrize("version", ['"1.0"', "v1.0.0", "1.0.0.0", "01.0.0", "2"])
def test_bad_semantic_version(version: str) -> None:
    text = yaml(
        f"""\
        orbit: 1
        workflow: wf
        version: {version}
        steps:
          - id: a
            sleep: 1s
        """
    )
    shown = version.strip('"')
    assert problems(text) == [
        f"wf.yaml:3: version: {shown!r} is not a semantic version such as 1.0.0"
    ]


def test_unsupported_language_version() -> None:
    text = yaml(
        """\
        orbit: 2
        workflow: wf
        version: 1.0.0
        steps:
          - id: a
            sleep: 1s
        """
    )
    assert problems(text) == [
        "wf.yaml:1: orbit: unsupported language version 2; this Orbit reads orbit: 1"
    ]


def test_bad_contract_version() -> None:
    text = yaml(
        """\
        orbit: 1
        workflow: wf
        version: 1.0.0
        tasks:
          t: {version: "-1"}
        steps:
          - id: a
            task: t
        """
    )
    assert problems(text) == ["wf.yaml:5: tasks.t.version: '-1' is not a valid contract version"]


def test_bad_task_name() -> None:
    text = yaml(
        """\
        orbit: 1
        workflow: wf
        version: 1.0.0
        tasks:
          "-t": {version: "1"}
        steps:
          - id: a
            sleep: 1s
        """
    )
    assert problems(text) == [
        "wf.yaml:5: tasks.-t: '-t' is not a valid task name: use letters, digits, - _ ."
        " (at most 100, starting with a letter or digit)"
    ]


def test_reserved_task_prefix() -> None:
    text = yaml(
        """\
        orbit: 1
        workflow: wf
        version: 1.0.0
        tasks:
          orbit.mail: {version: "1"}
        steps:
          - id: a
            task: orbit.mail
        """
    )
    assert problems(text) == [
        "wf.yaml:5: tasks['orbit.mail']: task names starting with 'orbit.' are reserved for Orbit",
        "wf.yaml:8: steps[0].task: 'orbit.mail' is reserved for Orbit:"
        " a task step or compensation cannot call it",
    ]


@pytest.mark.parametrize(
    ("name", "path"),
    [
        ("1go", "signals.1go"),
        ("_go", "signals._go"),
        # A key with other characters than letters, digits, - and _ is bracketed.
        ("go.now", "signals['go.now']"),
        ("go!", "signals['go!']"),
    ],
)
def test_bad_signal_name(name: str, path: str) -> None:
    text = yaml(
        f"""\
        orbit: 1
        workflow: wf
        version: 1.0.0
        signals:
          "{name}": {{}}
        steps:
          - id: a
            sleep: 1s
        """
    )
    assert problems(text) == [
        f"wf.yaml:5: {path}: {name!r} is not a valid signal name:"
        " use a letter, then letters, digits, - or _ (at most 100)"
    ]


def test_bad_query_name() -> None:
    text = yaml(
        """\
        orbit: 1
        workflow: wf
        version: 1.0.0
        queries:
          _stage: ${ steps.a.status }
        steps:
          - id: a
            sleep: 1s
        """
    )
    assert problems(text) == [
        "wf.yaml:5: queries._stage: '_stage' is not a valid query name:"
        " use a letter, then letters, digits, - or _ (at most 100)"
    ]


def test_query_that_is_not_an_expression() -> None:
    text = yaml(
        """\
        orbit: 1
        workflow: wf
        version: 1.0.0
        queries:
          stage: steps.a.status
        steps:
          - id: a
            sleep: 1s
        """
    )
    assert problems(text) == ["wf.yaml:5: queries.stage: must be an expression written ${ … }"]


@pytest.mark.parametrize("step_id", ["9a", "a.b", "a b", "_a"])
def test_bad_step_id(step_id: str) -> None:
    text = yaml(
        f"""\
        orbit: 1
        workflow: wf
        version: 1.0.0
        steps:
          - id: "{step_id}"
            sleep: 1s
        """
    )
    assert problems(text) == [
        f"wf.yaml:5: steps[0].id: {step_id!r} is not a valid step id:"
        " use a letter, then letters, digits, - or _ (at most 100)"
    ]


# -- JSON Schemas ------------------------------------------------------------


def test_invalid_input_schema_points_into_the_schema() -> None:
    text = yaml(
        """\
        orbit: 1
        workflow: wf
        version: 1.0.0
        input:
          type: object
          properties:
            name: {type: strin}
        steps:
          - id: a
            sleep: 1s
        """
    )
    assert problems(text) == [
        "wf.yaml:7: input.properties.name.type: not a valid JSON Schema (2020-12):"
        " 'strin' is not valid under any of the given schemas"
    ]


def test_input_schema_that_is_not_a_mapping() -> None:
    text = yaml(
        """\
        orbit: 1
        workflow: wf
        version: 1.0.0
        input: [string]
        steps:
          - id: a
            sleep: 1s
        """
    )
    assert problems(text) == [
        "wf.yaml:4: input: not a valid JSON Schema (2020-12):"
        " a JSON Schema must be a mapping (or true/false)"
    ]


def test_invalid_output_schema() -> None:
    text = yaml(
        """\
        orbit: 1
        workflow: wf
        version: 1.0.0
        output_schema:
          required: invoice_id
        steps:
          - id: a
            sleep: 1s
        """
    )
    assert problems(text) == [
        "wf.yaml:5: output_schema.required: not a valid JSON Schema (2020-12):"
        " 'invoice_id' is not of type 'array'"
    ]


def test_invalid_task_contract_schemas() -> None:
    text = yaml(
        """\
        orbit: 1
        workflow: wf
        version: 1.0.0
        tasks:
          t:
            version: "1"
            input:
              minProperties: -1
            output:
              type: 12
        steps:
          - id: a
            task: t
        """
    )
    assert problems(text) == [
        "wf.yaml:8: tasks.t.input.minProperties: not a valid JSON Schema (2020-12):"
        " -1 is less than the minimum of 0",
        "wf.yaml:10: tasks.t.output.type: not a valid JSON Schema (2020-12):"
        " 12 is not valid under any of the given schemas",
    ]


def test_invalid_signal_schema() -> None:
    text = yaml(
        """\
        orbit: 1
        workflow: wf
        version: 1.0.0
        signals:
          approval:
            type: object
            required: approved
        steps:
          - id: a
            await: approval
        """
    )
    assert problems(text) == [
        "wf.yaml:7: signals.approval.required: not a valid JSON Schema (2020-12):"
        " 'approved' is not of type 'array'"
    ]


# -- step kinds and their fields ---------------------------------------------


def test_step_with_no_kind() -> None:
    text = yaml(
        """\
        orbit: 1
        workflow: wf
        version: 1.0.0
        steps:
          - id: a
            input: {x: 1}
        """
    )
    assert problems(text) == [
        "wf.yaml:5: steps[0]: a step needs exactly one of task, await, sleep, workflow, http"
        " (this one has none)"
    ]


def test_step_with_two_kinds() -> None:
    text = yaml(
        """\
        orbit: 1
        workflow: wf
        version: 1.0.0
        tasks:
          t: {version: "1"}
        steps:
          - id: a
            task: t
            sleep: 1s
        """
    )
    assert problems(text) == [
        "wf.yaml:7: steps[0]: a step needs exactly one of task, await, sleep, workflow, http"
        " (this one has task and sleep)"
    ]


def test_step_with_three_kinds() -> None:
    text = yaml(
        """\
        orbit: 1
        workflow: wf
        version: 1.0.0
        steps:
          - id: a
            await: go
            workflow: child@1.0.0
            http: {url: "https://example.com"}
        """
    )
    assert problems(text) == [
        "wf.yaml:5: steps[0]: a step needs exactly one of task, await, sleep, workflow, http"
        " (this one has await and workflow and http)"
    ]


def test_input_is_not_allowed_on_an_await_step() -> None:
    text = yaml(
        """\
        orbit: 1
        workflow: wf
        version: 1.0.0
        signals:
          go: {}
        steps:
          - id: a
            await: go
            input: {x: 1}
        """
    )
    assert problems(text) == ["wf.yaml:9: steps[0].input: 'input' is not allowed on an await step"]


def test_retry_is_not_allowed_on_a_sleep_step() -> None:
    text = yaml(
        """\
        orbit: 1
        workflow: wf
        version: 1.0.0
        steps:
          - id: a
            sleep: 1s
            retry: {max_attempts: 2}
        """
    )
    assert problems(text) == ["wf.yaml:7: steps[0].retry: 'retry' is not allowed on a sleep step"]


def test_continue_on_error_is_not_allowed_on_a_sleep_step() -> None:
    text = yaml(
        """\
        orbit: 1
        workflow: wf
        version: 1.0.0
        steps:
          - id: a
            sleep: 1s
            continue_on_error: true
        """
    )
    assert problems(text) == [
        "wf.yaml:7: steps[0].continue_on_error: 'continue_on_error' is not allowed on a sleep step"
    ]


def test_for_is_not_allowed_on_an_http_step() -> None:
    text = yaml(
        """\
        orbit: 1
        workflow: wf
        version: 1.0.0
        steps:
          - id: a
            for: [1, 2]
            http: {url: "https://example.com"}
        """
    )
    assert problems(text) == ["wf.yaml:6: steps[0].for: 'for' is not allowed on an http step"]


def test_several_fields_not_allowed_are_each_reported() -> None:
    text = yaml(
        """\
        orbit: 1
        workflow: wf
        version: 1.0.0
        tasks:
          t: {version: "1"}
        steps:
          - id: a
            sleep: 1s
            timeout: 5s
            compensate: {task: t}
            input: {x: 1}
        """
    )
    assert problems(text) == [
        "wf.yaml:9: steps[0].timeout: 'timeout' is not allowed on a sleep step",
        "wf.yaml:10: steps[0].compensate: 'compensate' is not allowed on a sleep step",
        "wf.yaml:11: steps[0].input: 'input' is not allowed on a sleep step",
    ]


def test_schedule_timeout_is_not_allowed_on_a_workflow_step() -> None:
    text = yaml(
        """\
        orbit: 1
        workflow: wf
        version: 1.0.0
        steps:
          - id: a
            workflow: child@1.0.0
            schedule_timeout: 1m
        """
    )
    assert problems(text) == [
        "wf.yaml:7: steps[0].schedule_timeout: 'schedule_timeout' is not allowed on a workflow step"
    ]


def test_compensate_is_not_allowed_in_finally() -> None:
    text = yaml(
        """\
        orbit: 1
        workflow: wf
        version: 1.0.0
        tasks:
          t: {version: "1"}
        steps:
          - id: a
            task: t
        finally:
          - id: b
            task: t
            compensate: {task: t}
        """
    )
    assert problems(text) == [
        "wf.yaml:12: finally[0].compensate: 'compensate' is not allowed in finally"
    ]


def test_for_is_not_allowed_in_finally() -> None:
    text = yaml(
        """\
        orbit: 1
        workflow: wf
        version: 1.0.0
        tasks:
          t: {version: "1"}
        steps:
          - id: a
            task: t
        finally:
          - id: b
            task: t
            for: [1, 2]
            concurrency: 2
        """
    )
    assert problems(text) == [
        "wf.yaml:12: finally[0].for: 'for' is not allowed in finally",
        "wf.yaml:13: finally[0].concurrency: 'concurrency' is not allowed in finally",
    ]


@pytest.mark.parametrize(
    ("kind", "line"),
    [("await: go", "await"), ("sleep: 1s", "sleep"), ("workflow: child@1.0.0", "workflow")],
)
def test_finally_steps_are_tasks_or_http(kind: str, line: str) -> None:
    text = yaml(
        f"""\
        orbit: 1
        workflow: wf
        version: 1.0.0
        signals:
          go: {{}}
        steps:
          - id: a
            sleep: 1s
        finally:
          - id: b
            {kind}
        """
    )
    assert problems(text) == [
        f"wf.yaml:10: finally[0]: finally steps run tasks or http requests, not {line}"
    ]


def test_concurrency_without_for() -> None:
    text = yaml(
        """\
        orbit: 1
        workflow: wf
        version: 1.0.0
        tasks:
          t: {version: "1"}
        steps:
          - id: a
            task: t
            concurrency: 2
        """
    )
    assert problems(text) == [
        "wf.yaml:9: steps[0].concurrency: caps the units of a for step; this step has no for"
    ]


@pytest.mark.parametrize("value", [0, -3])
def test_concurrency_below_one(value: int) -> None:
    text = yaml(
        f"""\
        orbit: 1
        workflow: wf
        version: 1.0.0
        tasks:
          t: {{version: "1"}}
        steps:
          - id: a
            task: t
            for: [1, 2]
            concurrency: {value}
        """
    )
    assert problems(text) == ["wf.yaml:10: steps[0].concurrency: must be at least 1"]


@pytest.mark.parametrize(
    "value", ["yes", "1", "'true'", "[true]", "steps.a.ok", "'${ a } and more'"]
)
def test_if_that_is_not_a_boolean_or_an_expression(value: str) -> None:
    text = yaml(
        f"""\
        orbit: 1
        workflow: wf
        version: 1.0.0
        tasks:
          t: {{version: "1"}}
        steps:
          - id: a
            task: t
            if: {value}
        """
    )
    assert problems(text) == ["wf.yaml:9: steps[0].if: must be true, false or an expression ${ … }"]


@pytest.mark.parametrize("value", ["abc", "3", "{a: 1}", "'a ${ input.x }'"])
def test_for_that_is_not_a_list_or_an_expression(value: str) -> None:
    text = yaml(
        f"""\
        orbit: 1
        workflow: wf
        version: 1.0.0
        tasks:
          t: {{version: "1"}}
        steps:
          - id: a
            task: t
            for: {value}
        """
    )
    assert problems(text) == ["wf.yaml:9: steps[0].for: must be a list or an expression ${ … }"]


def test_two_expressions_in_one_string_read_as_one_expression() -> None:
    # A string that starts with ${ and ends with } is one expression, even
    # when it reads as two with text between them; CEL then fails to parse it.
    text = yaml(
        """\
        orbit: 1
        workflow: wf
        version: 1.0.0
        tasks:
          t: {version: "1"}
        steps:
          - id: a
            task: t
            input: ${ input.first } ${ input.last }
        """
    )
    assert problems(text) == [
        "wf.yaml:9: steps[0].input: invalid expression: Syntax error: mismatched input '}'"
        " (at column 13 of the expression); a string holds one whole expression:"
        " join values inside it (a + b)"
    ]


# -- retry -------------------------------------------------------------------


def test_retry_max_attempts_zero() -> None:
    text = yaml(
        """\
        orbit: 1
        workflow: wf
        version: 1.0.0
        tasks:
          t: {version: "1"}
        steps:
          - id: a
            task: t
            retry:
              max_attempts: 0
        """
    )
    assert problems(text) == [
        "wf.yaml:10: steps[0].retry.max_attempts: must be at least 1 (1 means no retry)"
    ]


def test_retry_backoff_below_one() -> None:
    text = yaml(
        """\
        orbit: 1
        workflow: wf
        version: 1.0.0
        tasks:
          t: {version: "1"}
        steps:
          - id: a
            task: t
            retry:
              backoff: 0.5
        """
    )
    assert problems(text) == ["wf.yaml:10: steps[0].retry.backoff: must be at least 1.0"]


def test_retry_max_interval_shorter_than_initial_interval() -> None:
    text = yaml(
        """\
        orbit: 1
        workflow: wf
        version: 1.0.0
        tasks:
          t: {version: "1"}
        steps:
          - id: a
            task: t
            retry:
              initial_interval: 10s
              max_interval: 1s
        """
    )
    assert problems(text) == [
        "wf.yaml:11: steps[0].retry.max_interval:"
        " max_interval must not be shorter than initial_interval"
    ]


def test_retry_empty_error_code() -> None:
    text = yaml(
        """\
        orbit: 1
        workflow: wf
        version: 1.0.0
        tasks:
          t: {version: "1"}
        steps:
          - id: a
            task: t
            retry:
              non_retryable: [OUT_OF_STOCK, ""]
        """
    )
    assert problems(text) == [
        "wf.yaml:10: steps[0].retry.non_retryable: error codes must not be empty"
    ]


def test_every_bad_retry_field_is_reported() -> None:
    text = yaml(
        """\
        orbit: 1
        workflow: wf
        version: 1.0.0
        tasks:
          t: {version: "1"}
        steps:
          - id: a
            workflow: child@1.0.0
            retry:
              max_attempts: 0
              backoff: 0.9
              initial_interval: 1m
              max_interval: 1s
        """
    )
    assert problems(text) == [
        "wf.yaml:10: steps[0].retry.max_attempts: must be at least 1 (1 means no retry)",
        "wf.yaml:11: steps[0].retry.backoff: must be at least 1.0",
        "wf.yaml:13: steps[0].retry.max_interval:"
        " max_interval must not be shorter than initial_interval",
    ]


def test_bad_compensate_retry() -> None:
    text = yaml(
        """\
        orbit: 1
        workflow: wf
        version: 1.0.0
        tasks:
          t: {version: "1"}
        steps:
          - id: a
            task: t
            compensate:
              task: t
              retry: {max_attempts: 0}
        """
    )
    assert problems(text) == [
        "wf.yaml:11: steps[0].compensate.retry.max_attempts: must be at least 1 (1 means no retry)"
    ]


def test_bad_defaults_retry_is_reported_once_at_the_defaults() -> None:
    # Reported once, where it was written: not once per task step that
    # inherits it, nor at a path the steps do not have.
    text = yaml(
        """\
        orbit: 1
        workflow: wf
        version: 1.0.0
        tasks:
          t: {version: "1"}
        defaults:
          retry:
            max_attempts: 0
        steps:
          - id: a
            task: t
          - id: b
            task: t
        """
    )
    assert problems(text) == [
        "wf.yaml:8: defaults.retry.max_attempts: must be at least 1 (1 means no retry)"
    ]


def test_bad_defaults_retry_is_reported_without_task_steps() -> None:
    # The defaults are checked on their own, even when no step inherits them.
    text = yaml(
        """\
        orbit: 1
        workflow: wf
        version: 1.0.0
        defaults:
          retry:
            max_attempts: 0
        steps:
          - id: a
            sleep: 1s
        """
    )
    assert problems(text) == [
        "wf.yaml:6: defaults.retry.max_attempts: must be at least 1 (1 means no retry)"
    ]


# -- child workflows and http ------------------------------------------------


@pytest.mark.parametrize(
    "reference", ["send-invoice", "send-invoice@1", "Send@1.0.0", "@1.0.0", "send-invoice@"]
)
def test_bad_child_reference(reference: str) -> None:
    text = yaml(
        f"""\
        orbit: 1
        workflow: wf
        version: 1.0.0
        steps:
          - id: a
            workflow: "{reference}"
        """
    )
    assert problems(text) == [
        f"wf.yaml:6: steps[0].workflow: {reference!r} is not a child reference"
        " such as send-invoice@1.0.0"
    ]


def test_bad_http_method() -> None:
    text = yaml(
        """\
        orbit: 1
        workflow: wf
        version: 1.0.0
        steps:
          - id: a
            http:
              method: FETCH
              url: https://example.com
        """
    )
    assert problems(text) == [
        "wf.yaml:7: steps[0].http.method: 'FETCH' is not one of"
        " GET, HEAD, POST, PUT, PATCH, DELETE, OPTIONS"
    ]


@pytest.mark.parametrize("url", ["example.com", "ftp://example.com", "'${ a }/path'"])
def test_http_url_without_a_scheme(url: str) -> None:
    text = yaml(
        f"""\
        orbit: 1
        workflow: wf
        version: 1.0.0
        steps:
          - id: a
            http:
              url: {url}
        """
    )
    assert problems(text) == [
        "wf.yaml:7: steps[0].http.url: must start with http:// or https://"
        " (or be an expression ${ … })"
    ]


# -- references ---------------------------------------------------------------


def test_undeclared_task_with_did_you_mean() -> None:
    text = yaml(
        """\
        orbit: 1
        workflow: wf
        version: 1.0.0
        tasks:
          charge-card: {version: "1"}
        steps:
          - id: a
            task: charge-crad
        """
    )
    assert problems(text) == [
        "wf.yaml:8: steps[0].task: undeclared task 'charge-crad' (did you mean 'charge-card'?);"
        " declare it under tasks"
    ]


def test_undeclared_task_without_any_tasks() -> None:
    text = yaml(
        """\
        orbit: 1
        workflow: wf
        version: 1.0.0
        steps:
          - id: a
            task: greet
        """
    )
    assert problems(text) == [
        "wf.yaml:6: steps[0].task: undeclared task 'greet'; declare it under tasks"
    ]


def test_undeclared_compensate_task() -> None:
    text = yaml(
        """\
        orbit: 1
        workflow: wf
        version: 1.0.0
        tasks:
          reserve-stock: {version: "1"}
          release-stock: {version: "1"}
        steps:
          - id: a
            task: reserve-stock
            compensate:
              task: relase-stock
        """
    )
    assert problems(text) == [
        "wf.yaml:11: steps[0].compensate.task: undeclared task 'relase-stock'"
        " (did you mean 'release-stock'?); declare it under tasks"
    ]


def test_a_task_step_cannot_name_the_built_in_http_task() -> None:
    # orbit.http.request is what http steps call; a task step may not name it.
    text = yaml(
        """\
        orbit: 1
        workflow: wf
        version: 1.0.0
        steps:
          - id: a
            task: orbit.http.request
        """
    )
    assert problems(text) == [
        "wf.yaml:6: steps[0].task: orbit.http.request is built in:"
        " write an http: step to make a request"
    ]


def test_a_compensate_cannot_name_the_built_in_http_task() -> None:
    text = yaml(
        """\
        orbit: 1
        workflow: wf
        version: 1.0.0
        tasks:
          t: {version: "1"}
        steps:
          - id: a
            task: t
            compensate: {task: orbit.http.request}
        """
    )
    assert problems(text) == [
        "wf.yaml:9: steps[0].compensate.task: 'orbit.http.request' is reserved for Orbit:"
        " a task step or compensation cannot call it"
    ]


def test_undeclared_signal_in_await() -> None:
    text = yaml(
        """\
        orbit: 1
        workflow: wf
        version: 1.0.0
        signals:
          approval: {}
        steps:
          - id: a
            await: aproval
        """
    )
    assert problems(text) == [
        "wf.yaml:8: steps[0].await: undeclared signal 'aproval' (did you mean 'approval'?)"
    ]


def test_undeclared_signal_in_await_without_signals() -> None:
    text = yaml(
        """\
        orbit: 1
        workflow: wf
        version: 1.0.0
        steps:
          - id: a
            await: approval
        """
    )
    assert problems(text) == ["wf.yaml:6: steps[0].await: undeclared signal 'approval'"]


def test_undeclared_signal_in_an_expression() -> None:
    text = yaml(
        """\
        orbit: 1
        workflow: wf
        version: 1.0.0
        signals:
          approval: {}
        tasks:
          t: {version: "1"}
        steps:
          - id: a
            task: t
            input:
              ok: ${ signals.aproval.approved }
              also: ${ signals["cancel"] }
        """
    )
    assert problems(text) == [
        "wf.yaml:12: steps[0].input.ok: undeclared signal 'aproval' (did you mean 'approval'?)",
        "wf.yaml:13: steps[0].input.also: undeclared signal 'cancel'",
    ]


def test_undeclared_step_in_after() -> None:
    text = yaml(
        """\
        orbit: 1
        workflow: wf
        version: 1.0.0
        tasks:
          t: {version: "1"}
        steps:
          - id: charge
            task: t
          - id: ship
            task: t
            after: [charge, chrage]
        """
    )
    assert problems(text) == [
        "wf.yaml:11: steps[1].after[1]: undeclared step 'chrage' among the steps"
        " (did you mean 'charge'?)"
    ]


def test_undeclared_step_in_after_in_a_block_list() -> None:
    text = yaml(
        """\
        orbit: 1
        workflow: wf
        version: 1.0.0
        tasks:
          t: {version: "1"}
        steps:
          - id: a
            task: t
          - id: b
            task: t
            after:
              - a
              - zz
        """
    )
    assert problems(text) == ["wf.yaml:13: steps[1].after[1]: undeclared step 'zz' among the steps"]


def test_finally_after_may_only_name_finally_steps() -> None:
    text = yaml(
        """\
        orbit: 1
        workflow: wf
        version: 1.0.0
        tasks:
          t: {version: "1"}
        steps:
          - id: a
            task: t
        finally:
          - id: b
            task: t
            after: [a]
        """
    )
    assert problems(text) == [
        "wf.yaml:12: finally[0].after[0]: finally steps run after every main step;"
        " name only finally steps here"
    ]


def test_undeclared_step_in_an_expression() -> None:
    text = yaml(
        """\
        orbit: 1
        workflow: wf
        version: 1.0.0
        tasks:
          t: {version: "1"}
        steps:
          - id: charge
            task: t
          - id: ship
            task: t
            input:
              amount: ${ steps.chrage.output.amount }
        """
    )
    assert problems(text) == [
        "wf.yaml:12: steps[1].input.amount: undeclared step 'chrage' (did you mean 'charge'?)"
    ]


def test_undeclared_step_in_the_index_form() -> None:
    text = yaml(
        """\
        orbit: 1
        workflow: wf
        version: 1.0.0
        tasks:
          t: {version: "1"}
        steps:
          - id: cool-down
            sleep: 1s
          - id: b
            task: t
            input: ${ steps["cool-dwon"].output }
        """
    )
    assert problems(text) == [
        "wf.yaml:11: steps[1].input: undeclared step 'cool-dwon' (did you mean 'cool-down'?)"
    ]


def test_hyphenated_step_id_after_a_dot() -> None:
    text = yaml(
        """\
        orbit: 1
        workflow: wf
        version: 1.0.0
        tasks:
          t: {version: "1"}
        steps:
          - id: cool-down
            sleep: 1s
          - id: b
            task: t
            input: ${ steps.cool-down.output }
        """
    )
    assert problems(text) == [
        "wf.yaml:11: steps[1].input: undeclared step 'cool'; CEL reads '-' as minus,"
        " so write steps[\"cool-down\"] for the step 'cool-down'",
        "wf.yaml:11: steps[1].input: undeclared variable 'down'",
    ]


def test_a_step_reading_a_step_below_it() -> None:
    text = yaml(
        """\
        orbit: 1
        workflow: wf
        version: 1.0.0
        tasks:
          t: {version: "1"}
        steps:
          - id: a
            task: t
            input: ${ steps.b.output }
          - id: b
            task: t
        """
    )
    assert problems(text) == [
        "wf.yaml:9: steps[0].input: step 'b' does not run before this;"
        " add it to after to read it here"
    ]


def test_a_step_reading_a_parallel_step() -> None:
    text = yaml(
        """\
        orbit: 1
        workflow: wf
        version: 1.0.0
        tasks:
          t: {version: "1"}
        steps:
          - id: a
            task: t
          - id: b
            task: t
            after: []
            if: ${ steps.a.status == "succeeded" }
        """
    )
    assert problems(text) == [
        "wf.yaml:12: steps[1].if: step 'a' does not run before this;"
        " add it to after to read it here"
    ]


def test_a_step_reading_its_own_output() -> None:
    text = yaml(
        """\
        orbit: 1
        workflow: wf
        version: 1.0.0
        tasks:
          t: {version: "1"}
        steps:
          - id: a
            task: t
            input: ${ steps.a.output }
        """
    )
    assert problems(text) == [
        "wf.yaml:9: steps[0].input: step 'a' does not run before this;"
        " add it to after to read it here"
    ]


def test_a_main_step_reading_a_finally_step() -> None:
    text = yaml(
        """\
        orbit: 1
        workflow: wf
        version: 1.0.0
        tasks:
          t: {version: "1"}
        steps:
          - id: a
            task: t
            input: ${ steps.f.output }
        finally:
          - id: f
            task: t
        output: ${ steps.f.status }
        """
    )
    assert problems(text) == [
        "wf.yaml:9: steps[0].input: step 'f' is a finally step, which runs last:"
        " it cannot be read here",
        "wf.yaml:13: output: step 'f' is a finally step, which runs last: it cannot be read here",
    ]


def test_step_after_itself() -> None:
    text = yaml(
        """\
        orbit: 1
        workflow: wf
        version: 1.0.0
        tasks:
          t: {version: "1"}
        steps:
          - id: a
            task: t
            after: [a]
        """
    )
    assert problems(text) == ["wf.yaml:9: steps[0].after[0]: step 'a' cannot run after itself"]


def test_dependency_cycle_of_two() -> None:
    text = yaml(
        """\
        orbit: 1
        workflow: wf
        version: 1.0.0
        tasks:
          t: {version: "1"}
        steps:
          - id: a
            task: t
            after: [b]
          - id: b
            task: t
        """
    )
    assert problems(text) == ["wf.yaml:9: steps[0].after: dependency cycle: a -> b -> a"]


def test_dependency_cycle_of_three() -> None:
    text = yaml(
        """\
        orbit: 1
        workflow: wf
        version: 1.0.0
        tasks:
          t: {version: "1"}
        steps:
          - id: a
            task: t
            after: [c]
          - id: b
            task: t
          - id: c
            task: t
        """
    )
    assert problems(text) == ["wf.yaml:9: steps[0].after: dependency cycle: a -> c -> b -> a"]


def test_dependency_cycle_in_finally() -> None:
    text = yaml(
        """\
        orbit: 1
        workflow: wf
        version: 1.0.0
        tasks:
          t: {version: "1"}
        steps:
          - id: a
            task: t
        finally:
          - id: x
            task: t
            after: [y]
          - id: y
            task: t
            after: [x]
        """
    )
    assert problems(text) == ["wf.yaml:12: finally[0].after: dependency cycle: x -> y -> x"]


def test_a_cycle_hides_the_checks_of_expressions() -> None:
    text = yaml(
        """\
        orbit: 1
        workflow: wf
        version: 1.0.0
        tasks:
          t: {version: "1"}
        steps:
          - id: a
            task: t
            after: [b]
            input: ${ inpt }
          - id: b
            task: t
        """
    )
    assert problems(text) == ["wf.yaml:9: steps[0].after: dependency cycle: a -> b -> a"]


def test_duplicate_step_ids() -> None:
    text = yaml(
        """\
        orbit: 1
        workflow: wf
        version: 1.0.0
        tasks:
          t: {version: "1"}
        steps:
          - id: a
            task: t
          - id: b
            task: t
            after: []
          - id: a
            task: t
            after: []
        """
    )
    assert problems(text) == ["wf.yaml:12: steps[2].id: duplicate step id 'a' (first at steps[0])"]


def test_duplicate_step_ids_between_steps_and_finally() -> None:
    text = yaml(
        """\
        orbit: 1
        workflow: wf
        version: 1.0.0
        tasks:
          t: {version: "1"}
        steps:
          - id: cleanup
            task: t
        finally:
          - id: cleanup
            task: t
        """
    )
    assert problems(text) == [
        "wf.yaml:10: finally[0].id: duplicate step id 'cleanup' (first at steps[0])"
    ]


def test_adjacent_duplicate_step_ids_report_only_the_duplicate() -> None:
    # The second `a` depends by default on the step above, the first `a`; it
    # must not also be reported as "cannot run after itself" at
    # steps[1].after[0], a key the file does not have.
    text = yaml(
        """\
        orbit: 1
        workflow: wf
        version: 1.0.0
        tasks:
          t: {version: "1"}
        steps:
          - id: a
            task: t
          - id: a
            task: t
        """
    )
    assert problems(text) == ["wf.yaml:9: steps[1].id: duplicate step id 'a' (first at steps[0])"]


def test_duplicate_step_ids_do_not_invent_a_cycle() -> None:
    # Keyed by id, a, b, a would read as a -> b -> a: a cycle the file does
    # not have must not be reported.
    text = yaml(
        """\
        orbit: 1
        workflow: wf
        version: 1.0.0
        tasks:
          t: {version: "1"}
        steps:
          - id: a
            task: t
          - id: b
            task: t
          - id: a
            task: t
        """
    )
    assert problems(text) == ["wf.yaml:11: steps[2].id: duplicate step id 'a' (first at steps[0])"]


# -- expressions -------------------------------------------------------------


def test_undeclared_variable() -> None:
    text = yaml(
        """\
        orbit: 1
        workflow: wf
        version: 1.0.0
        tasks:
          t: {version: "1"}
        steps:
          - id: a
            task: t
            input:
              list:
                - ${ inpt.name }
        """
    )
    assert problems(text) == [
        "wf.yaml:11: steps[0].input.list[0]: undeclared variable 'inpt' (did you mean 'input'?)"
    ]


def test_undeclared_variable_beside_a_comprehension_variable() -> None:
    text = yaml(
        """\
        orbit: 1
        workflow: wf
        version: 1.0.0
        tasks:
          t: {version: "1"}
        steps:
          - id: a
            task: t
            input: ${ input.xs.map(x, x + y) }
        """
    )
    assert problems(text) == ["wf.yaml:9: steps[0].input: undeclared variable 'y'"]


def test_item_outside_a_for_step() -> None:
    text = yaml(
        """\
        orbit: 1
        workflow: wf
        version: 1.0.0
        tasks:
          t: {version: "1"}
        steps:
          - id: a
            task: t
            input:
              value: ${ item }
              position: ${ index }
        """
    )
    assert problems(text) == [
        "wf.yaml:10: steps[0].input.value: 'item' is only bound inside the input of a step"
        " with for",
        "wf.yaml:11: steps[0].input.position: 'index' is only bound inside the input of a step"
        " with for",
    ]


def test_item_in_the_compensate_of_a_for_step() -> None:
    text = yaml(
        """\
        orbit: 1
        workflow: wf
        version: 1.0.0
        tasks:
          t: {version: "1"}
        steps:
          - id: a
            task: t
            for: [1, 2]
            compensate:
              task: t
              input: ${ item }
        """
    )
    assert problems(text) == [
        "wf.yaml:12: steps[0].compensate.input: 'item' is only bound inside the input"
        " of a step with for"
    ]


def test_item_in_the_for_of_its_own_step() -> None:
    # The `for` list is computed before any unit exists, so `item` cannot be
    # bound there.
    text = yaml(
        """\
        orbit: 1
        workflow: wf
        version: 1.0.0
        tasks:
          t: {version: "1"}
        steps:
          - id: a
            task: t
            for: ${ item }
        """
    )
    assert problems(text) == [
        "wf.yaml:9: steps[0].for: 'item' is only bound inside the input of a step with for"
    ]


def test_item_in_the_if_of_a_for_step() -> None:
    # `if` decides for the whole step (skipped: output null), not per unit;
    # the docs bind `item` and `index` in the `input` only.
    text = yaml(
        """\
        orbit: 1
        workflow: wf
        version: 1.0.0
        tasks:
          t: {version: "1"}
        steps:
          - id: a
            task: t
            for: [1, 2]
            if: ${ index > 0 }
        """
    )
    assert problems(text) == [
        "wf.yaml:10: steps[0].if: 'index' is only bound inside the input of a step with for"
    ]


def test_execution_attempt_in_an_if() -> None:
    text = yaml(
        """\
        orbit: 1
        workflow: wf
        version: 1.0.0
        tasks:
          t: {version: "1"}
        steps:
          - id: a
            task: t
            if: ${ execution.attempt > 1 }
        """
    )
    assert problems(text) == [
        "wf.yaml:9: steps[0].if: execution.attempt is only known in the input of a dispatched call"
    ]


def test_execution_attempt_in_the_output() -> None:
    text = yaml(
        """\
        orbit: 1
        workflow: wf
        version: 1.0.0
        tasks:
          t: {version: "1"}
        steps:
          - id: a
            task: t
        output: ${ execution.attempt }
        """
    )
    assert problems(text) == [
        "wf.yaml:9: output: execution.attempt is only known in the input of a dispatched call"
    ]


def test_unknown_execution_field() -> None:
    text = yaml(
        """\
        orbit: 1
        workflow: wf
        version: 1.0.0
        tasks:
          t: {version: "1"}
        steps:
          - id: a
            task: t
            input:
              a: ${ execution.foo }
              b: ${ execution.ids }
        """
    )
    assert problems(text) == [
        "wf.yaml:10: steps[0].input.a: execution has no field 'foo'",
        "wf.yaml:11: steps[0].input.b: execution has no field 'ids' (did you mean 'id'?)",
    ]


def test_unknown_step_field() -> None:
    text = yaml(
        """\
        orbit: 1
        workflow: wf
        version: 1.0.0
        tasks:
          t: {version: "1"}
        steps:
          - id: a
            task: t
          - id: b
            task: t
            input: ${ steps.a.outptu }
        """
    )
    assert problems(text) == [
        "wf.yaml:11: steps[1].input: steps.a has no field 'outptu'; it has output and status"
        " (did you mean 'output'?)"
    ]


def test_cel_syntax_error() -> None:
    text = yaml(
        """\
        orbit: 1
        workflow: wf
        version: 1.0.0
        tasks:
          t: {version: "1"}
        steps:
          - id: a
            task: t
            input:
              x: ${ input. }
              y: ${ 1 + }
        """
    )
    assert problems(text) == [
        "wf.yaml:10: steps[0].input.x: invalid expression: Syntax error: no viable alternative"
        " at input '.' (at column 7 of the expression)",
        "wf.yaml:11: steps[0].input.y: invalid expression: Syntax error: mismatched input"
        " '<EOF>' (at column 4 of the expression)",
    ]


def test_empty_expression() -> None:
    text = yaml(
        """\
        orbit: 1
        workflow: wf
        version: 1.0.0
        tasks:
          t: {version: "1"}
        steps:
          - id: a
            task: t
            input: ${ }
        """
    )
    assert problems(text) == [
        "wf.yaml:9: steps[0].input: invalid expression: the expression is empty"
    ]


def test_expressions_in_http_requests_are_checked() -> None:
    text = yaml(
        """\
        orbit: 1
        workflow: wf
        version: 1.0.0
        steps:
          - id: a
            http:
              url: ${ inpt.url }
              headers:
                x-id: ${ execution.foo }
              body:
                order: ${ steps.zz.output }
        """
    )
    assert problems(text) == [
        "wf.yaml:7: steps[0].http.url: undeclared variable 'inpt' (did you mean 'input'?)",
        "wf.yaml:9: steps[0].http.headers.x-id: execution has no field 'foo'",
        "wf.yaml:11: steps[0].http.body.order: undeclared step 'zz'",
    ]


def test_expressions_in_queries_and_output_are_checked() -> None:
    text = yaml(
        """\
        orbit: 1
        workflow: wf
        version: 1.0.0
        queries:
          stage: ${ steps.x.status }
        steps:
          - id: a
            sleep: 1s
        output:
          done: ${ item }
        """
    )
    assert problems(text) == [
        "wf.yaml:5: queries.stage: undeclared step 'x'",
        "wf.yaml:10: output.done: 'item' is only bound inside the input of a step with for",
    ]


def test_an_expression_value_on_the_line_after_its_key_points_at_the_key() -> None:
    text = yaml(
        """\
        orbit: 1
        workflow: wf
        version: 1.0.0
        tasks:
          t: {version: "1"}
        steps:
          - id: a
            task: t
            input:
              ${ inpt }
        """
    )
    assert problems(text) == [
        "wf.yaml:9: steps[0].input: undeclared variable 'inpt' (did you mean 'input'?)"
    ]


# -- many problems at once ---------------------------------------------------


def test_several_structural_problems_are_all_reported_in_line_order() -> None:
    text = yaml(
        """\
        orbit: 1
        workflow: wf
        version: 1.0.0
        descripton: x
        steps:
          - id: a
            sleep: 5
          - task: t
            retry: {max_attempts: "2"}
        """
    )
    assert problems(text) == [
        "wf.yaml:4: descripton: unknown key 'descripton' (did you mean 'description'?)",
        "wf.yaml:7: steps[0].sleep: 5 has no unit; write it as 5s, 5ms, 5m, …",
        "wf.yaml:8: steps[1].id: missing required key 'id'",
        "wf.yaml:9: steps[1].retry.max_attempts: expected an integer",
    ]


def test_several_build_problems_are_all_reported() -> None:
    text = yaml(
        """\
        orbit: 2
        workflow: wf
        version: 1.0.0
        tasks:
          t: {version: "1"}
        steps:
          - id: a
            task: t
            concurrency: 3
          - id: b
            sleep: 1s
            retry: {max_attempts: 2}
          - id: c
            workflow: child
            if: yes
        """
    )
    assert problems(text) == [
        "wf.yaml:1: orbit: unsupported language version 2; this Orbit reads orbit: 1",
        "wf.yaml:9: steps[0].concurrency: caps the units of a for step; this step has no for",
        "wf.yaml:12: steps[1].retry: 'retry' is not allowed on a sleep step",
        "wf.yaml:14: steps[2].workflow: 'child' is not a child reference"
        " such as send-invoice@1.0.0",
        "wf.yaml:15: steps[2].if: must be true, false or an expression ${ … }",
    ]


def test_several_problems_of_names_and_requests_are_all_reported() -> None:
    text = yaml(
        """\
        orbit: 1
        workflow: Bad_Name
        version: "1"
        signals:
          "9x": {}
        tasks:
          orbit.t: {version: "1"}
          t: {version: "1"}
        steps:
          - id: a
            task: t
          - id: c
            http: {method: TRACE, url: "x"}
        """
    )
    assert problems(text) == [
        "wf.yaml:2: workflow: 'Bad_Name' is not a workflow name: use lowercase letters, digits,"
        " - _ . (at most 100, starting with a letter or digit)",
        "wf.yaml:3: version: '1' is not a semantic version such as 1.0.0",
        "wf.yaml:5: signals.9x: '9x' is not a valid signal name: use a letter,"
        " then letters, digits, - or _ (at most 100)",
        "wf.yaml:7: tasks['orbit.t']: task names starting with 'orbit.' are reserved for Orbit",
        "wf.yaml:13: steps[1].http.method: 'TRACE' is not one of"
        " GET, HEAD, POST, PUT, PATCH, DELETE, OPTIONS",
        "wf.yaml:13: steps[1].http.url: must start with http:// or https://"
        " (or be an expression ${ … })",
    ]


def test_build_problems_hide_the_checks_of_names_and_requests() -> None:
    # Names, versions, schemas and http requests are checked on the IR, in
    # the pass after the build; a file the builder refuses has no IR, so only
    # the build's problems are reported (see compiler.py).
    text = yaml(
        """\
        orbit: 2
        workflow: Bad_Name
        version: "1"
        signals:
          "9x": {}
        tasks:
          orbit.t: {version: "1"}
          t: {version: "1"}
        steps:
          - id: a
            task: t
            concurrency: 3
          - id: b
            sleep: 1s
            retry: {max_attempts: 2}
          - id: c
            http: {method: TRACE, url: "x"}
        """
    )
    assert problems(text) == [
        "wf.yaml:1: orbit: unsupported language version 2; this Orbit reads orbit: 1",
        "wf.yaml:12: steps[0].concurrency: caps the units of a for step; this step has no for",
        "wf.yaml:15: steps[1].retry: 'retry' is not allowed on a sleep step",
    ]


def test_several_reference_problems_are_all_reported() -> None:
    text = yaml(
        """\
        orbit: 1
        workflow: wf
        version: 1.0.0
        signals:
          approval: {}
        tasks:
          charge: {version: "1"}
        steps:
          - id: a
            task: chrage
            if: ${ inpt.go }
          - id: b
            await: aproval
          - id: c
            task: charge
            after: [a, bb]
            input:
              x: ${ steps.a.outptu }
              y: ${ signals.approvl }
        finally:
          - id: d
            task: nope
        output: ${ steps.zz.output }
        """
    )
    assert problems(text) == [
        "wf.yaml:10: steps[0].task: undeclared task 'chrage' (did you mean 'charge'?);"
        " declare it under tasks",
        "wf.yaml:11: steps[0].if: undeclared variable 'inpt' (did you mean 'input'?)",
        "wf.yaml:13: steps[1].await: undeclared signal 'aproval' (did you mean 'approval'?)",
        "wf.yaml:16: steps[2].after[1]: undeclared step 'bb' among the steps (did you mean 'b'?)",
        "wf.yaml:18: steps[2].input.x: steps.a has no field 'outptu'; it has output and status"
        " (did you mean 'output'?)",
        "wf.yaml:19: steps[2].input.y: undeclared signal 'approvl' (did you mean 'approval'?)",
        "wf.yaml:22: finally[0].task: undeclared task 'nope'; declare it under tasks",
        "wf.yaml:23: output: undeclared step 'zz'",
    ]


def test_structural_problems_hide_later_ones() -> None:
    # Structure is checked first; a file that does not have the right shape
    # is not checked for meaning, so the undeclared task is not reported yet.
    text = yaml(
        """\
        orbit: 1
        workflow: wf
        version: 1.0.0
        timeout: 10
        steps:
          - id: a
            task: nope
        """
    )
    assert problems(text) == ["wf.yaml:4: timeout: 10 has no unit; write it as 10s, 10ms, 10m, …"]


def test_lines_are_counted_from_the_first_line_of_the_text() -> None:
    # Leading comments and blank lines count; CRLF line ends count once.
    text = (
        "# a comment\n\norbit: 1\nworkflow: wf\nversion: 1.0.0\nsteps:\n  - id: a\n    sleep: 5\n"
    )
    assert problems(text) == [
        "wf.yaml:8: steps[0].sleep: 5 has no unit; write it as 5s, 5ms, 5m, …"
    ]
    crlf = "orbit: 1\r\nworkflow: wf\r\nversion: 1.0.0\r\nsteps:\r\n  - id: a\r\n    sleep: 5\r\n"
    assert problems(crlf) == [
        "wf.yaml:6: steps[0].sleep: 5 has no unit; write it as 5s, 5ms, 5m, …"
    ]


def test_lines_in_a_full_example() -> None:
    text = (EXAMPLES / "order-fulfilment.yaml").read_text(encoding="utf-8")
    broken = (
        text.replace("await: approval", "await: aproval")
        .replace("task: refund-card", "task: refund")
        .replace("${ item }", "${ items }")
        .replace("after: [charge, invoice]", "after: [charge, invoic]")
    )
    assert problems(broken) == [
        "wf.yaml:53: steps[1].await: undeclared signal 'aproval' (did you mean 'approval'?)",
        "wf.yaml:64: steps[2].compensate.task: undeclared task 'refund'"
        " (did you mean 'refund-card'?); declare it under tasks",
        "wf.yaml:71: steps[3].input: undeclared variable 'items' (did you mean 'item'?)",
        "wf.yaml:88: steps[6].http.body.invoice: step 'invoice' does not run before this;"
        " add it to after to read it here",
        "wf.yaml:90: steps[6].after[1]: undeclared step 'invoic' among the steps"
        " (did you mean 'invoice'?)",
    ]
