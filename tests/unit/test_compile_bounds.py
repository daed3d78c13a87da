"""Compiling is bounded: a definition past the limits is refused early, the rest costs
memory and time in proportion to its size (issue 31, items 2 and 3).

Memory is measured with tracemalloc and work as CPU time, each compared between two
sizes of one shape rather than against a clock: linear work grows four times from N
to 4N, the quadratic work it replaced sixteen times.
"""

from __future__ import annotations

import contextlib
import difflib
import json
import time
import tracemalloc
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from orbit_model import DefinitionError, compile_definition, definition_from_ir
from orbit_model.children import pin_children
from orbit_model.compiler import definition_from_body
from orbit_model.limits import MAX_AFTER, MAX_IR_BYTES, MAX_PROBLEMS, MAX_STEPS
from orbit_model.problems import did_you_mean
from orbit_model.yaml_source import MAX_CHARACTERS

HEAD = "orbit: 1\nworkflow: wf\nversion: 1.0.0\ntasks: {t: {version: '1'}}\n"


def sleeps(count: int, finally_count: int = 0) -> str:
    """``count`` sleep steps, each after the one before it (and task steps in finally)."""
    lines = [HEAD + "steps:"]
    lines += [f"  - {{id: s{i}, sleep: 1s}}" for i in range(count)]
    if finally_count:
        lines += ["finally:"] + [f"  - {{id: f{i}, task: t}}" for i in range(finally_count)]
    return "\n".join(lines) + "\n"


def readers(count: int) -> str:
    """``count`` task steps, each reading the output of the one before it."""
    lines = [HEAD + "steps:", "  - {id: s0, task: t}"]
    lines += [
        f"  - {{id: s{i}, task: t, input: {{v: '${{ steps.s{i - 1}.output }}'}}}}"
        for i in range(1, count)
    ]
    return "\n".join(lines) + "\n"


def problems(text: str) -> list[str]:
    with pytest.raises(DefinitionError) as caught:
        compile_definition(text, "wf.yaml")
    assert caught.value.code == "INVALID_DEFINITION"
    return [str(problem) for problem in caught.value.problems]


def peak_memory(work: Callable[[], Any]) -> int:
    """The most memory ``work`` held at once, in bytes."""
    tracemalloc.start()
    try:
        with contextlib.suppress(DefinitionError):
            work()
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def cpu_time(work: Callable[[], Any]) -> float:
    """The least CPU time of three runs of ``work``: a busy machine only adds to it."""
    best = float("inf")
    for _ in range(3):
        started = time.process_time()
        with contextlib.suppress(DefinitionError):
            work()
        best = min(best, time.process_time() - started)
    return best


# -- item 2: aliases that multiply bytes ---------------------------------------


def alias_bomb(string_bytes: int) -> str:
    """The probe's definition: a string anchored, aliased 10 times a level for 3 levels."""
    lines = [HEAD + f"description: &l0 '{'x' * string_bytes}'", "input:"]
    for level in range(1, 4):
        lines.append(f"  l{level}: &l{level} [{', '.join([f'*l{level - 1}'] * 10)}]")
    lines += ["steps:", "  - {id: a, sleep: 1s}"]
    return "\n".join(lines) + "\n"


def test_a_string_aliased_a_thousand_times_is_refused_as_it_is_read() -> None:
    # At the probe's 200 KB the IR was 227 MB; this one's 20 KB made a 20 MB IR.
    text = alias_bomb(20_000)
    assert problems(text) == [
        f"wf.yaml:5: input.l3[0][9][8]: the document expands to more than {MAX_CHARACTERS:,}"
        " characters of keys and values, the limit of a definition"
        " (an alias counts each time it is used)"
    ]
    assert peak_memory(lambda: compile_definition(text)) < 10 * len(text) + MAX_CHARACTERS // 2


def test_an_ir_past_its_size_is_refused_though_its_yaml_is_not() -> None:
    # 800,000 characters of YAML (written \x01), each written \u0001 in JSON: 4.8 MB of IR.
    escaped = "\\x01" * 800_000
    text = sleeps(1).replace("steps:", f'description: "{escaped}"\nsteps:')
    [problem] = problems(text)
    assert problem.startswith("wf.yaml:1: the compiled definition is 4,800,")
    assert problem.endswith(f"bytes of JSON; the limit is {MAX_IR_BYTES:,}")


def test_an_ir_submitted_as_json_is_held_to_the_same_limits() -> None:
    big = compile_definition(sleeps(1)).ir.to_json_data() | {"description": "x" * MAX_IR_BYTES}
    with pytest.raises(DefinitionError, match="the compiled definition is 4,194,"):
        definition_from_ir(big, "up.json")
    steps = compile_definition(sleeps(MAX_STEPS)).ir.to_json_data()
    steps["steps"].append({"kind": "sleep", "id": "one_more", "duration_ms": 1})
    with pytest.raises(DefinitionError) as caught:
        definition_from_body(json.dumps(steps).encode(), is_ir=True)
    assert [str(problem) for problem in caught.value.problems] == [
        f"<body>: steps[{MAX_STEPS}]: the definition has {MAX_STEPS + 1:,} steps"
        f" (finally included); the limit is {MAX_STEPS:,}"
    ]
    # A definition read back from the store was held to the limits of its day.
    assert definition_from_ir(steps, limits=False).ir.steps[-1].id == "one_more"


# -- item 3: steps, edges, and work in proportion ----------------------------------


def test_the_limit_of_steps_is_met_and_one_more_is_refused_at_its_line() -> None:
    assert len(compile_definition(sleeps(MAX_STEPS)).ir.steps) == MAX_STEPS
    assert problems(sleeps(MAX_STEPS + 1)) == [
        f"wf.yaml:{MAX_STEPS + 6}: steps[{MAX_STEPS}]: the definition has 1,001 steps"
        " (finally included); the limit is 1,000"
    ]
    assert problems(sleeps(MAX_STEPS - 1, finally_count=2)) == [
        f"wf.yaml:{MAX_STEPS + 7}: finally[1]: the definition has 1,001 steps"
        " (finally included); the limit is 1,000"
    ]


def test_many_steps_are_refused_before_anything_is_built_of_them() -> None:
    # 8,000 steps took 1.3 GB, and 20,000 ended in MemoryError; 3,000 took 200 MB.
    text = sleeps(3000)
    [problem] = problems(text)
    assert "steps[1000]: the definition has 3,000 steps (finally included)" in problem
    assert peak_memory(lambda: compile_definition(text)) < 30_000_000


def test_the_limit_of_after_entries_counts_the_implied_ones_too() -> None:
    # Steps 1-49 each imply the one before (49); steps 50.. each name 50 earlier ones.
    def text(count: int) -> str:
        lines = [HEAD + "steps:"]
        for i in range(count):
            after = f", after: [{', '.join(f's{j}' for j in range(50))}]" if i >= 50 else ""
            lines.append(f"  - {{id: s{i}, sleep: 1s{after}}}")
        return "\n".join(lines) + "\n"

    assert MAX_AFTER - 1 == 49 + 50 * (249 - 50)
    compile_definition(text(249))
    assert problems(text(250)) == [
        f"wf.yaml:255: steps[249].after: the definition's after entries pass the limit of"
        f" {MAX_AFTER:,} (a step without after has one: the step before it)"
    ]


@pytest.mark.parametrize("shape", [sleeps, readers], ids=["sleeps", "readers"])
def test_memory_grows_in_proportion_to_the_steps(shape: Callable[[int], str]) -> None:
    # Each step kept the set of every step before it: 250 to 1,000 steps took 10x.
    small = peak_memory(lambda: compile_definition(shape(250)))
    large = peak_memory(lambda: compile_definition(shape(1000)))
    assert large / small < 6, f"{small:,} bytes for 250 steps, {large:,} for 1,000"


def test_a_deep_template_of_expressions_costs_about_what_a_flat_one_does() -> None:
    # Nested generators resumed each expression once per level above it: 190 deep,
    # 10,000 expressions took 27 times as long as 2 deep.
    def deep(depth: int) -> str:
        values = ", ".join(["'${ input }'"] * 10_000)
        return sleeps(0).replace(
            "steps:\n",
            f"steps:\n  - id: a\n    task: t\n    input: {'[' * depth}{values}{']' * depth}\n",
        )

    shallow = cpu_time(lambda: compile_definition(deep(2)))
    nested = cpu_time(lambda: compile_definition(deep(190)))
    # About 3 times now (reading 190 levels of YAML is not free); 27 before. The bound
    # sits between them with room for a busy machine's noise on 50 ms of work.
    assert nested / shallow < 10, f"{shallow:.2f} s 2 deep, {nested:.2f} s 190 deep"


def test_only_the_first_problems_are_listed_and_only_they_are_looked_for() -> None:
    # 1,000 undeclared dependencies, each a "did you mean" among 1,000 ids alike:
    # every one was computed (16 s), though nobody reads a thousand problems.
    def text(wrong: bool) -> str:
        lines = [HEAD + "steps:", "  - {id: step_number_0, task: t}"]
        for i in range(1, MAX_STEPS):
            before = f"stp_numbr_{i - 1}x" if wrong else f"step_number_{i - 1}"
            lines.append(f"  - {{id: step_number_{i}, task: t, after: [{before}]}}")
        return "\n".join(lines) + "\n"

    listed = problems(text(wrong=True))
    assert listed[0] == f"wf.yaml: more problems follow; only the first {MAX_PROBLEMS} are listed"
    assert listed[1] == (
        "wf.yaml:7: steps[1].after[0]: undeclared step 'stp_numbr_0x' among the steps"
        " (did you mean 'step_number_0'?)"
    )
    assert len(listed) == MAX_PROBLEMS + 1
    valid, refused = (
        cpu_time(lambda: compile_definition(text(False))),
        cpu_time(lambda: compile_definition(text(True))),
    )
    assert refused < 3 * valid, f"{valid:.2f} s to compile, {refused:.2f} s to refuse"


@given(
    st.text("abcde_-", max_size=8),
    st.lists(st.text("abcde_-", max_size=8), max_size=12),
)
def test_a_suggestion_is_the_one_difflib_picks(name: str, candidates: list[str]) -> None:
    close = difflib.get_close_matches(name, sorted(set(candidates)), n=1, cutoff=0.6)
    assert did_you_mean(name, candidates) == (f" (did you mean {close[0]!r}?)" if close else "")


def test_a_step_is_found_by_id_in_a_copy_with_other_steps() -> None:
    child = compile_definition(HEAD.replace("wf", "child") + "steps:\n  - {id: a, sleep: 1s}\n")
    parent = compile_definition(
        HEAD + "steps:\n  - {id: a, sleep: 1s}\n  - {id: c, workflow: child@1.0.0}\n"
    )
    assert parent.ir.step("c").child.hash is None  # type: ignore[union-attr]
    pinned = pin_children(parent, {("child", "1.0.0"): child})
    assert pinned.ir.step("c").child.hash == child.hash  # type: ignore[union-attr]
    assert parent.ir.step("a") is parent.ir.steps[0]
    with pytest.raises(KeyError):
        parent.ir.step("nope")
