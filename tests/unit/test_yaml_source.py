import tracemalloc

import pytest

from orbit_model.yaml_source import MAX_CHARACTERS, MAX_DEPTH, YamlSourceError, load_yaml


def test_values_are_plain_json_with_lines() -> None:
    document = load_yaml("a: 1\nb:\n  - x: true\n  - y\nc: {d: null}\n", "f.yaml")
    assert document.data == {"a": 1, "b": [{"x": True}, "y"], "c": {"d": None}}
    assert document.lines[("a",)] == 1
    assert document.lines[("b",)] == 2
    assert document.lines[("b", 0, "x")] == 3
    assert document.lines[("b", 1)] == 4
    assert document.lines[("c", "d")] == 5


def test_line_of_falls_back_to_the_nearest_parent() -> None:
    document = load_yaml("a:\n  b: 1\n")
    assert document.line_of(("a", "b", "missing", 3)) == 2
    assert document.line_of(("nothing",)) == 1


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("v: no", "no"),
        ("v: on", "on"),
        ("v: yes", "yes"),
        ("v: 1:30", "1:30"),
        ("v: 2026-01-01", "2026-01-01"),
        ("v: 0o17", 15),
        ("v: 0x1f", 31),
        ("v: 007", 7),
        ("v: 1e3", 1000.0),
        ("v: .5", 0.5),
        ("v: ~", None),
        ("v:", None),
        ("v: TRUE", True),
        ("v: '1'", "1"),
        ("v: !!str 12", "12"),
    ],
)
def test_scalars_follow_the_yaml_1_2_core_schema(text: str, value: object) -> None:
    assert load_yaml(text).data == {"v": value}


def test_merge_keys_and_aliases() -> None:
    document = load_yaml("base: &b {x: 1, y: 2}\nuse:\n  <<: *b\n  y: 3\nagain: *b\n")
    assert document.data["use"] == {"x": 1, "y": 3}
    assert document.data["again"] == {"x": 1, "y": 2}


@pytest.mark.parametrize(
    ("text", "line", "reason"),
    [
        ("a: [1", 1, "not valid YAML"),
        ("a: 1\na: 2\n", 2, "duplicate key 'a'"),
        ("x:\n  1: a\n", 2, "mapping keys must be strings"),
        ("", 1, "holds no YAML document"),
        ("# only a comment\n", 1, "holds no YAML document"),
        ("a: 1\n---\nb: 2\n", 3, "only one YAML document"),
        ("a: !!binary aGk=\n", 1, "unsupported YAML tag"),
        ("a: !custom x\n", 1, "unsupported YAML tag"),
        ("a: .nan\n", 1, "not a JSON number"),
        ("a: -.inf\n", 1, "not a JSON number"),
        ("a: &x [*x]\n", 1, "alias refers to itself"),
    ],
)
def test_refuses_what_json_cannot_hold(text: str, line: int, reason: str) -> None:
    with pytest.raises(YamlSourceError, match=reason) as caught:
        load_yaml(text)
    assert caught.value.line == line


def test_an_alias_bomb_is_refused_not_expanded() -> None:
    lines = ["a0: &a0 [x, x, x, x, x, x, x, x, x, x]"]
    lines += [f"a{n}: &a{n} [*a{n - 1}, *a{n - 1}, *a{n - 1}, *a{n - 1}]" for n in range(1, 30)]
    with pytest.raises(YamlSourceError, match="expands to more than"):
        load_yaml("\n".join(lines))


def test_deep_nesting_is_a_clear_error() -> None:
    with pytest.raises(YamlSourceError, match="nesting depth"):
        load_yaml("a: " + "[" * 5000 + "]" * 5000)


# -- bounded reading (issue 31, item 2) ----------------------------------------


def _alias_levels(text: str, fan: int, levels: int) -> str:
    """A string anchored, then each level a list aliasing the one below ``fan`` times."""
    lines = [f"l0: &l0 '{text}'"]
    for level in range(1, levels + 1):
        lines.append(f"l{level}: &l{level} [{', '.join([f'*l{level - 1}'] * fan)}]")
    return "\n".join(lines) + "\n"


def test_aliases_that_multiply_bytes_are_refused_as_the_document_is_read() -> None:
    # The probe's shape: a few values, but 20 KB times 1,000 is 20 MB of text (its
    # 200 KB string compiled to a 227 MB IR). A count of values let it through.
    text = _alias_levels("x" * 20_000, fan=10, levels=3)
    tracemalloc.start()
    try:
        with pytest.raises(YamlSourceError) as caught:
            load_yaml(text)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert f"expands to more than {MAX_CHARACTERS:,} characters" in caught.value.reason
    assert "an alias counts each time it is used" in caught.value.reason
    assert caught.value.path[:1] == ("l3",)
    assert peak < 5 * len(text) + MAX_CHARACTERS // 2  # what it read, not what it stands for


def test_aliases_within_the_limit_are_expanded() -> None:
    document = load_yaml(_alias_levels("x" * 1000, fan=10, levels=2))
    assert document.data["l2"] == [["x" * 1000] * 10] * 10


def test_a_deep_document_costs_no_more_per_value_than_a_flat_one() -> None:
    # A map of whole paths held each value's path: 150 levels deep, every value
    # cost 150 path parts (the document below took three times the memory).
    def peak_of(depth: int) -> int:
        text = "a: " + "[" * depth + ", ".join(["1"] * 20_000) + "]" * depth
        tracemalloc.start()
        try:
            load_yaml(text)
            return tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()

    assert peak_of(150) < 1.3 * peak_of(2)


def test_a_document_nested_past_the_limit_is_a_clear_error() -> None:
    load_yaml("a: " + "[" * (MAX_DEPTH - 1) + "]" * (MAX_DEPTH - 1))
    for depth in (MAX_DEPTH, 600):  # 600 was a RecursionError
        with pytest.raises(YamlSourceError, match=f"nests deeper than {MAX_DEPTH} levels"):
            load_yaml("a:\n  " + "{b: " * depth + "1" + "}" * depth)


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("a: " + "1" * 5000, "the integer has too many digits"),  # was a ValueError
        ("a: 1e999", "1e999 is not a JSON number"),  # was infinity, then a ValueError
        ("a: -1e999", "-1e999 is not a JSON number"),
    ],
)
def test_numbers_json_cannot_hold_are_clear_errors(text: str, reason: str) -> None:
    with pytest.raises(YamlSourceError, match=reason) as caught:
        load_yaml(text)
    assert caught.value.line == 1


def test_a_mapping_with_a_merge_key_may_be_aliased() -> None:
    # Read again through the alias, its merged keys were taken for duplicates.
    document = load_yaml("base: &b {x: 1, y: 2}\nuse: &u\n  <<: *b\n  y: 3\nagain: *u\n")
    assert document.data["again"] == {"x": 1, "y": 3}
