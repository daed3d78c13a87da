import pytest
from hypothesis import given
from hypothesis import strategies as st
from jsonschema import Draft202012Validator

from orbit_model.contracts import (
    SchemaProblem,
    _fast_for,
    _meets_metaschema,
    check_schema,
    contract_for,
    json_path,
)
from orbit_model.errors import ErrorCode, OrbitError
from orbit_model.reference_validator import schema_problem

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


# -- the compiled fast path: what it accepts, the reference (jsonschema) accepts --

_JSON = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=6),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=4), inner, max_size=4)
    ),
    max_leaves=12,
)
_FAST_SCHEMAS = [
    {"type": "object", "required": ["value"], "properties": {"value": {"type": "integer"}}},
    {"type": "array", "items": {"type": "number", "minimum": 0}, "uniqueItems": True},
    {"type": "array", "prefixItems": [{"type": "integer"}, {"type": "string"}], "items": False},
    {"type": "object", "unevaluatedProperties": False, "properties": {"a": {"type": "boolean"}}},
    {"enum": [1, True, "1", None, [1], {"a": 1}]},
    {"const": 1},
    {"type": "string", "pattern": "^\\d+$", "minLength": 1, "maxLength": 3},
    {"type": "string", "format": "email"},
    {"oneOf": [{"type": "integer"}, {"type": "number", "multipleOf": 0.5}]},
    {"type": "object", "patternProperties": {"^x": {"type": "null"}}, "minProperties": 1},
    {"type": "object", "dependentRequired": {"a": ["b"]}, "propertyNames": {"maxLength": 2}},
    {"anyOf": [{"type": "array", "contains": {"const": 0}}, {"not": {"type": "array"}}]},
    {"$defs": {"n": {"type": "integer"}}, "type": "array", "items": {"$ref": "#/$defs/n"}},
]


@pytest.mark.parametrize("schema", _FAST_SCHEMAS)
def test_schemas_without_defaults_get_the_compiled_validator(schema: dict[str, object]) -> None:
    assert contract_for(schema)._fast is not None
    assert contract_for(ORDER)._fast is None  # it declares defaults: the reference only


@pytest.mark.parametrize("schema", _FAST_SCHEMAS)
@given(value=_JSON)
def test_what_the_compiled_validator_accepts_the_reference_accepts(
    schema: dict[str, object], value: object
) -> None:
    fast = contract_for(schema)._fast
    assert fast is not None
    if fast.is_valid(value):
        assert not list(Draft202012Validator(schema).iter_errors(value)), value


@pytest.mark.parametrize(
    ("schema", "value"),
    [
        ({"type": "integer"}, 2**80),  # past 64 bits
    ],
)
def test_where_the_compiled_validator_refuses_the_reference_decides(
    schema: dict[str, object], value: object
) -> None:
    assert contract_for(schema).apply(value) == value


@pytest.mark.parametrize("ref", ["https://example.invalid/s.json", "file:///etc/hostname"])
def test_the_compiled_validator_retrieves_no_referenced_schema(ref: str) -> None:
    assert _fast_for({"$ref": ref}) is None  # refused to retrieve it, so not built


# -- checking a schema: jsonschema-rs's "valid" is the reference's ------------------

_KEYWORDS = [
    "type",
    "properties",
    "items",
    "prefixItems",
    "required",
    "enum",
    "const",
    "minimum",
    "maximum",
    "exclusiveMinimum",
    "minLength",
    "maxLength",
    "pattern",
    "patternProperties",
    "additionalProperties",
    "anyOf",
    "oneOf",
    "allOf",
    "not",
    "$defs",
    "$ref",
    "format",
    "minItems",
    "uniqueItems",
    "multipleOf",
    "dependentRequired",
    "propertyNames",
    "unevaluatedProperties",
    "contains",
    "if",
    "then",
    "else",
    "$schema",
    "$id",
    "default",
]
_TYPES = st.sampled_from(["string", "integer", "number", "object", "array", "boolean", "null"])
_PATTERNS = st.sampled_from(["^a", "[", "\\d+", "\\pL", "(?P<x>a)", "a{2,", "(?i)b", "\\z"])
_SCHEMAS = st.recursive(
    st.booleans() | st.dictionaries(st.sampled_from(_KEYWORDS), _JSON, max_size=2),
    lambda inner: st.dictionaries(
        st.sampled_from(_KEYWORDS),
        inner
        | st.lists(inner, max_size=3)
        | st.dictionaries(st.text(max_size=3) | _PATTERNS, inner, max_size=2)
        | _TYPES
        | st.lists(_TYPES, max_size=3)
        | _PATTERNS
        | _JSON,
        max_size=4,
    ),
    max_leaves=10,
)


@given(schema=_SCHEMAS)
def test_a_schema_jsonschema_rs_finds_valid_the_reference_finds_valid(schema: object) -> None:
    """``orbit validate`` checks schemas without loading the reference library; where the
    fast check says valid, the reference must agree, or a bad schema would be taken."""
    if _meets_metaschema(schema):
        assert schema_problem(schema) is None


@pytest.mark.parametrize(
    ("schema", "reason"),
    [
        ({"type": "string", "pattern": "["}, "is not a 'regex'"),
        ({"$schema": "http://json-schema.org/draft-07/schema#", "type": "strin"}, "strin"),
        ({"minimum": "x"}, "is not of type 'number'"),
    ],
)
def test_a_problem_is_worded_by_the_reference(schema: object, reason: str) -> None:
    with pytest.raises(SchemaProblem) as caught:
        check_schema(schema)
    assert reason in caught.value.reason
