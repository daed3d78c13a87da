import pytest

from orbit_model.yaml_source import YamlSourceError, load_yaml


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
