import pytest
from hypothesis import given
from hypothesis import strategies as st

from orbit_model.contracts import SchemaProblem, check_schema, contract_for, json_path
from orbit_model.errors import ErrorCode, OrbitError

ORDER = {
    "type": "object",
    "required": ["order_id"],
    "properties": {
        "order_id": {"type": "string"},
        "currency": {"type": "string", "default": "EUR"},
        "lines": {
            "type": "array",
            "items": {
                "type": "object",
                "properties": {"quantity": {"type": "integer", "default": 1}},
            },
        },
        "address": {
            "type": "object",
            "default": {},
            "properties": {"country": {"type": "string", "default": "NL"}},
        },
    },
}


def test_defaults_are_filled_in_nested_and_the_input_is_untouched() -> None:
    value = {"order_id": "o-1", "lines": [{}, {"quantity": 3}]}
    result = contract_for(ORDER).apply(value)
    assert result == {
        "order_id": "o-1",
        "currency": "EUR",
        "lines": [{"quantity": 1}, {"quantity": 3}],
        "address": {"country": "NL"},
    }
    assert value == {"order_id": "o-1", "lines": [{}, {"quantity": 3}]}


def test_violations_name_the_json_path() -> None:
    with pytest.raises(OrbitError) as caught:
        contract_for(ORDER).apply({"lines": [{"quantity": "two"}]}, "input")
    assert caught.value.code is ErrorCode.INVALID_INPUT
    assert caught.value.message == (
        "input does not match its schema: $: 'order_id' is a required property; "
        "$.lines[0].quantity: 'two' is not of type 'integer'"
    )


def test_many_violations_are_summarised() -> None:
    schema = {"type": "array", "items": {"type": "integer"}}
    with pytest.raises(OrbitError, match=r"\(and 2 more\)"):
        contract_for(schema).apply(["a", "b", "c", "d", "e", "f", "g"])


def test_draft_2020_12_keywords_are_enforced() -> None:
    schema = {"type": "array", "prefixItems": [{"type": "integer"}], "items": False}
    contract = contract_for(schema)
    assert contract.apply([1]) == [1]
    with pytest.raises(OrbitError):
        contract.apply([1, 2])
    with pytest.raises(OrbitError):
        contract_for({"type": "object", "unevaluatedProperties": False}).apply({"x": 1})


def test_one_validator_per_schema() -> None:
    assert contract_for({"type": "string"}) is contract_for({"type": "string"})


@pytest.mark.parametrize(
    ("schema", "path"),
    [
        ({"type": "strin"}, ("type",)),
        ({"properties": {"a": {"minimum": "x"}}}, ("properties", "a", "minimum")),
        ("not a schema", ()),
    ],
)
def test_bad_schemas_name_their_path(schema: object, path: tuple[object, ...]) -> None:
    with pytest.raises(SchemaProblem) as caught:
        check_schema(schema)
    assert caught.value.path == path


def test_json_path_spelling() -> None:
    assert json_path(()) == "$"
    assert json_path(("items", 0, "price")) == "$.items[0].price"
    assert json_path(("a-b",)) == "$['a-b']"


@given(st.dictionaries(st.text(min_size=1), st.integers()))
def test_empty_schema_accepts_everything_unchanged(value: dict[str, int]) -> None:
    assert contract_for({}).apply(value) == value
