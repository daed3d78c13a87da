"""Hypothesis strategies for valid workflows, and a YAML writer of many styles.

A generated workflow is plain data in which durations and contract versions
are marker objects, so the writer can spell each one in any of its
equivalent forms (``30s``, ``30000ms``, ``PT30S``; ``"1"`` or ``1``).
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Any

import yaml
from hypothesis import strategies as st

from orbit_model.yaml_source import load_yaml


@dataclass(frozen=True)
class Duration:
    milliseconds: int

    def spellings(self) -> list[str]:
        ms = self.milliseconds
        forms = [f"{ms}ms"]
        if ms % 1000 == 0:
            forms += [f"{ms // 1000}s", f"PT{ms // 1000}S"]
        if ms % 60_000 == 0:
            forms += [f"{ms // 60_000}m", f"PT{ms // 60_000}M"]
        return forms


@dataclass(frozen=True)
class ContractVersion:
    number: int


TEXT = st.text(
    alphabet=st.characters(
        codec="utf-8", exclude_categories=("Cc", "Cs", "Cf", "Zl", "Zp", "Co", "Cn")
    ),
    max_size=20,
)
DURATIONS = st.sampled_from([250, 1000, 1500, 30_000, 60_000, 300_000]).map(Duration)
LITERALS = st.one_of(st.integers(-1000, 1000), st.booleans(), TEXT, st.none())


@st.composite
def workflows(draw: st.DrawFn) -> dict[str, Any]:
    """A workflow that compiles, as data with markers."""
    task_names = [f"task-{n}" for n in range(draw(st.integers(1, 3)))]
    signal_names = draw(st.lists(st.sampled_from(["approval", "go", "stop"]), unique=True))
    workflow: dict[str, Any] = {
        "orbit": 1,
        "workflow": "wf-" + draw(st.sampled_from(["a", "b.c", "d_e"])),
        "version": f"{draw(st.integers(0, 9))}.{draw(st.integers(0, 9))}.0",
        "input": {
            "type": "object",
            "properties": {"x": {"type": "integer", "default": draw(st.integers(0, 9))}},
        },
        "tasks": {
            name: {"version": ContractVersion(draw(st.integers(1, 3)))} for name in task_names
        },
    }
    if draw(st.booleans()):
        workflow["description"] = draw(TEXT)
    if draw(st.booleans()):
        workflow["timeout"] = draw(DURATIONS)
    if signal_names:
        workflow["signals"] = {name: {"type": "object"} for name in signal_names}
    if draw(st.booleans()):
        workflow["defaults"] = {"retry": {"max_attempts": draw(st.integers(1, 5))}}
    steps: list[dict[str, Any]] = []
    for index in range(draw(st.integers(1, 5))):
        steps.append(draw(_step(f"s{index}", [s["id"] for s in steps], task_names, signal_names)))
    workflow["steps"] = steps
    if draw(st.booleans()):
        workflow["finally"] = [{"id": "cleanup", "task": task_names[0]}]
    if draw(st.booleans()):
        workflow["output"] = {"first": "${ steps.s0.status }", "x": "${ input.x }"}
    return workflow


@st.composite
def _step(
    draw: st.DrawFn, step_id: str, earlier: list[str], tasks: list[str], signals: list[str]
) -> dict[str, Any]:
    kinds = ["task", "sleep", "http", "workflow"] + (["await"] if signals else [])
    kind = draw(st.sampled_from(kinds))
    step: dict[str, Any] = {"id": step_id}
    if earlier and draw(st.booleans()):
        step["after"] = draw(st.lists(st.sampled_from(earlier), unique=True, max_size=2))
    if draw(st.integers(0, 3)) == 0:
        step["if"] = draw(st.sampled_from(["${ input.x > 1 }", True, False]))
    if kind == "await":
        step["await"] = draw(st.sampled_from(signals))
        if draw(st.booleans()):
            step["timeout"] = draw(DURATIONS)
        return step
    if kind == "sleep":
        step["sleep"] = draw(DURATIONS)
        return step
    if kind == "http":
        step["http"] = {
            "method": draw(st.sampled_from(["GET", "POST"])),
            "url": draw(st.sampled_from(["https://example.org/hook", "${ 'https://x.test/' }"])),
            "body": {"n": draw(LITERALS)},
        }
    elif kind == "workflow":
        step["workflow"] = "child@1.0.0"
        step["input"] = {"x": "${ input.x }"}
    else:
        step["task"] = draw(st.sampled_from(tasks))
        step["input"] = draw(_inputs(step.get("after", earlier[-1:]) if earlier else []))
        if draw(st.booleans()):
            step["for"] = "${ [1, 2, 3] }"
            step["concurrency"] = draw(st.integers(1, 4))
            step["input"]["unit"] = "${ item }"
        if draw(st.booleans()):
            step["compensate"] = {"task": draw(st.sampled_from(tasks)), "input": {"of": step_id}}
    if draw(st.booleans()):
        step["retry"] = {
            "max_attempts": draw(st.integers(1, 5)),
            "initial_interval": draw(DURATIONS),
            "backoff": draw(st.sampled_from([1.0, 1.5, 2.0])),
            "non_retryable": draw(st.lists(st.sampled_from(["A", "B", "C"]), unique=True)),
        }
    if draw(st.booleans()):
        step["timeout"] = draw(DURATIONS)
    if draw(st.booleans()):
        step["continue_on_error"] = True
    return step


@st.composite
def _inputs(draw: st.DrawFn, readable_steps: list[str]) -> dict[str, Any]:
    values: dict[str, Any] = {}
    for key in draw(st.lists(st.sampled_from(["a", "b", "c", "d"]), unique=True, max_size=3)):
        choices = [LITERALS, st.just("${ input.x + 1 }")]
        if readable_steps:
            choices.append(st.sampled_from([f"${{ steps.{s}.output }}" for s in readable_steps]))
        values[key] = draw(st.one_of(*choices))
    return values


# -- writing ---------------------------------------------------------------


def to_yaml(workflow: dict[str, Any], rnd: random.Random) -> str:
    """The workflow as YAML, in a style picked by ``rnd``."""
    data = _restyle(workflow, rnd)

    class Dumper(yaml.SafeDumper):
        pass

    def text(dumper: yaml.SafeDumper, value: str) -> yaml.Node:
        style = rnd.choice([None, "'", '"'])
        if style is None and not _plain_is_text(value):
            style = "'"  # PyYAML writes YAML 1.1; a plain 0E0 is a number in 1.2
        return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)

    def mapping(dumper: yaml.SafeDumper, value: dict[str, Any]) -> yaml.Node:
        return dumper.represent_mapping(
            "tag:yaml.org,2002:map", value.items(), flow_style=rnd.random() < 0.3
        )

    def sequence(dumper: yaml.SafeDumper, value: list[Any]) -> yaml.Node:
        return dumper.represent_sequence(
            "tag:yaml.org,2002:seq", value, flow_style=rnd.random() < 0.3
        )

    Dumper.add_representer(str, text)
    Dumper.add_representer(dict, mapping)
    Dumper.add_representer(list, sequence)
    rendered = yaml.dump(
        data,
        Dumper=Dumper,
        sort_keys=False,
        allow_unicode=rnd.random() < 0.5,
        width=float("inf"),
        indent=rnd.choice([2, 4]),
    )
    lines = rendered.splitlines()
    for _ in range(rnd.randint(0, 3)):
        lines.insert(
            rnd.randint(0, len(lines)), "# " + rnd.choice(["a comment", "steps: [x]", "#"])
        )
    return "\n".join(lines) + "\n"


def _plain_is_text(value: str) -> bool:
    """Whether ``value`` written plain reads back, in Orbit's YAML 1.2, as this string."""
    try:
        return load_yaml(f"k: {value}\n", "probe").data == {"k": value}
    except Exception:
        return False


def _restyle(value: Any, rnd: random.Random) -> Any:
    if isinstance(value, Duration):
        return rnd.choice(value.spellings())
    if isinstance(value, ContractVersion):
        return rnd.choice([value.number, str(value.number)])
    if isinstance(value, dict):
        items = list(value.items())
        rnd.shuffle(items)
        return {key: _restyle(item, rnd) for key, item in items}
    if isinstance(value, list):
        return [_restyle(item, rnd) for item in value]
    if isinstance(value, str) and value.startswith("${ ") and value.endswith(" }"):
        inner = value[3:-2]
        return rnd.choice(["${" + inner + "}", "${ " + inner + " }", "${   " + inner + "\t}"])
    return value


# -- changing --------------------------------------------------------------


def leaf_paths(value: Any, path: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Paths of the leaves whose change changes meaning (``defaults`` can be overridden)."""
    if isinstance(value, dict):
        return [
            p
            for key, item in value.items()
            if key != "defaults"
            for p in leaf_paths(item, (*path, key))
        ]
    if isinstance(value, list):
        return [p for index, item in enumerate(value) for p in leaf_paths(item, (*path, index))]
    return [] if value is None else [path]


def changed(workflow: dict[str, Any], path: tuple[Any, ...]) -> dict[str, Any]:
    """A copy of the workflow with the leaf at ``path`` given another value."""

    def change(value: Any) -> Any:
        if isinstance(value, bool):
            return not value
        if isinstance(value, int):
            return value + 1
        if isinstance(value, float):
            return value + 0.5
        if isinstance(value, Duration):
            return Duration(value.milliseconds + 1)
        if isinstance(value, ContractVersion):
            return ContractVersion(value.number + 10)
        return value + "x"

    def rebuild(value: Any, rest: tuple[Any, ...]) -> Any:
        if not rest:
            return change(value)
        head, *tail = rest
        if isinstance(value, dict):
            return {k: rebuild(v, tuple(tail)) if k == head else v for k, v in value.items()}
        return [rebuild(v, tuple(tail)) if i == head else v for i, v in enumerate(value)]

    result: dict[str, Any] = rebuild(workflow, path)
    return result
