"""Event types' names and schemas: what is refused at add, where a payload
fails, RE2 for every tenant pattern, and the example shown to subscribers."""

from __future__ import annotations

from typing import Any

import pytest

from dispatcher.core.errors import BadInput
from dispatcher.core.eventschema import (
    check_name,
    check_schema,
    compile_schema,
    example_of,
    first_error,
)


@pytest.mark.parametrize("name", ["order.paid", "a", "A-b_c.9", "x" * 256])
def test_names_accepted(name: str) -> None:
    assert check_name(name) == name


@pytest.mark.parametrize("name", ["", "x" * 257, "a b", "a/b", "é", None, 3])
def test_names_refused(name: Any) -> None:
    with pytest.raises(BadInput, match="event type name"):
        check_name(name)


@pytest.mark.parametrize(
    ("schema", "words"),
    [
        ([], "JSON object"),
        ({"type": "foo"}, "at $.type"),
        ({"properties": {"a": {"minimum": "1"}}}, "at $.properties.a.minimum"),
        ({"$schema": "http://json-schema.org/draft-07/schema#"}, "draft 2020-12"),
        ({"pattern": "(a)\\1"}, "RE2"),
        ({"patternProperties": {"(?=x)": {}}}, "RE2"),
        ({"patternProperties": {"a": {}}, "unevaluatedProperties": False}, "together"),
    ],
)
def test_schemas_refused(schema: Any, words: str) -> None:
    with pytest.raises(BadInput) as info:
        check_schema(schema)
    assert words in str(info.value) and "\n" not in str(info.value)


def test_a_schema_too_deep_is_refused_not_overflowed() -> None:
    schema: dict[str, Any] = {}
    node = schema
    for _ in range(2000):
        node["not"] = node = {}
    with pytest.raises(BadInput, match="nested more than"):
        check_schema(schema)


PAID = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "type": "object",
    "properties": {
        "amount": {"type": "number"},
        "items": {"type": "array", "items": {"type": "object", "required": ["sku"]}},
    },
    "required": ["amount"],
    "additionalProperties": False,
}


@pytest.mark.parametrize(
    ("payload", "where"),
    [
        ({"amount": 1, "items": [{"sku": "a"}]}, None),
        ({"amount": "x"}, "$.amount: 'x' is not of type 'number'"),
        ({}, "$: 'amount' is a required property"),
        ({"amount": 1, "items": [{"sku": 1}, {}]}, "$.items[1]: 'sku' is a required property"),
        ({"amount": 1, "extra": 2}, "$: additional properties are not allowed ('extra')"),
    ],
)
def test_where_a_payload_fails(payload: Any, where: str | None) -> None:
    assert first_error(compile_schema(check_schema(PAID)), payload) == where


def test_tenant_patterns_run_under_re2() -> None:
    """`(a+)+$` backtracks exponentially in Python's `re`; RE2 answers at once."""
    schema = check_schema({
        "properties": {"s": {"pattern": "^(a+)+$"}},
        "patternProperties": {"^(b+)+$": {"type": "integer"}},
        "additionalProperties": {"type": "string"},
    })  # fmt: skip
    v = compile_schema(schema)
    evil = "a" * 5000 + "!"
    assert first_error(v, {"s": evil}) is not None
    assert first_error(v, {"b" * 5000 + "!": "fine"}) is None  # not matched: additional, a string
    assert first_error(v, {"bbb": "x"}) == "$.bbb: 'x' is not of type 'integer'"


def test_a_long_value_is_cut_to_one_short_line() -> None:
    where = first_error(compile_schema({"type": "integer"}), "line\n" * 1000)
    assert where is not None and "\n" not in where and len(where) < 250


def test_a_recursive_schema_on_a_deep_payload_is_refused_not_overflowed() -> None:
    v = compile_schema(check_schema(
        {"$defs": {"n": {"type": "array", "items": {"$ref": "#/$defs/n"}}}, "$ref": "#/$defs/n"}
    ))  # fmt: skip
    deep: list[Any] = []
    for _ in range(5000):
        deep = [deep]
    assert first_error(v, deep) == "$: the payload is nested too deeply to check"


@pytest.mark.parametrize(
    ("schema", "example"),
    [
        ({"examples": [{"amount": 5}], "type": "object"}, {"amount": 5}),
        (PAID, {"amount": 0, "items": [{}]}),
        ({"type": ["null", "string"]}, "string"),
        ({"properties": {"c": {"enum": ["EUR"]}, "d": {"default": 2}, "k": {"const": True}}},
         {"c": "EUR", "d": 2, "k": True}),
        ({}, None),
    ],
)  # fmt: skip
def test_examples(schema: Any, example: Any) -> None:
    assert example_of(schema) == example
