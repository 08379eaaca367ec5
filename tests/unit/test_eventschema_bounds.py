"""What a tenant's schema may do, as pure rules (issue 32 rows 1-4; SPEC
"Limits"): no reference leaves the schema, no `$schema` below the root,
a size cap, a budget that every keyword is charged to, and `uniqueItems`,
`enum` and `const` that decide exactly as jsonschema's own but in linear
time and with short messages."""

from __future__ import annotations

import socket
from typing import Any

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st
from jsonschema import Draft202012Validator

from dispatcher.core.errors import BadInput
from dispatcher.core.eventschema import (
    MAX_SCHEMA_BYTES,
    Budget,
    OverBudget,
    check_schema,
    compile_schema,
    first_error,
)

DRAFT = "https://json-schema.org/draft/2020-12/schema"

json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-5, 5) | st.sampled_from([0.0, 1.0, 2.5])
    | st.sampled_from(["", "a", "b"]),
    lambda inner: st.lists(inner, max_size=4)
    | st.dictionaries(st.sampled_from(["a", "b", "c"]), inner, max_size=3),
    max_leaves=12,
)  # fmt: skip


@pytest.mark.parametrize(
    "ref",
    ["http://127.0.0.1:1/s.json", "https://example.com/s", "file:///etc/passwd",
     "//127.0.0.1/x", "other.json", "other.json#/a", "urn:x:y", ""],
)  # fmt: skip
@pytest.mark.parametrize("keyword", ["$ref", "$dynamicRef"])
def test_a_reference_outside_the_schema_is_refused(keyword: str, ref: str) -> None:
    with pytest.raises(BadInput, match="outside the schema"):
        check_schema({"properties": {"a": {"items": {keyword: ref}}}})


@pytest.mark.parametrize("ref", ["#", "#/$defs/a", "#anchor", "#/properties/x"])
def test_a_fragment_is_fine(ref: str) -> None:
    check_schema({"$defs": {"a": {"$anchor": "anchor"}}, "properties": {"x": {"$ref": ref}}})


@pytest.mark.parametrize(
    "schema",
    [{"properties": {"a": {"$schema": DRAFT}}},
     {"$defs": {"x": {"$schema": "http://json-schema.org/draft-07/schema#"}}},
     {"enum": [{"$schema": DRAFT, "pattern": "(a+)+$"}], "$ref": "#/enum/0"},
     {"x-data": [[{"$schema": DRAFT}]]}],
)  # fmt: skip
def test_schema_below_the_root_is_refused(schema: dict[str, Any]) -> None:
    """A subschema's `$schema` makes jsonschema switch to the class it
    names, leaving the RE2 keywords and the budget behind."""
    with pytest.raises(BadInput, match=r"\$schema only at its root"):
        check_schema(schema)
    with pytest.raises(BadInput):  # stored before the rule: not compiled either
        compile_schema(schema)


def test_the_root_schema_keyword_stays_with_our_class() -> None:
    """`$ref: "#"` descends into the root: without its `$schema` dropped,
    jsonschema would validate it with its own class and Python's `re`."""
    schema = {"$schema": DRAFT,
              "properties": {"x": {"$ref": "#"}, "y": {"pattern": "(?=a)"}}}  # fmt: skip
    with pytest.raises(BadInput, match="RE2"):  # stored by hand: check_schema refuses it
        first_error(compile_schema(schema), {"x": {"y": "a"}})


def test_size_is_capped() -> None:
    under = {"description": "x" * (MAX_SCHEMA_BYTES - 40)}
    assert len(orjson.dumps(under)) <= MAX_SCHEMA_BYTES
    check_schema(under)
    with pytest.raises(BadInput, match="64 KiB"):
        check_schema({"description": "x" * MAX_SCHEMA_BYTES})


def test_an_unresolvable_reference_fetches_nothing() -> None:
    """A schema stored before the rule: the validator's registry retrieves
    nothing, so a listening server on 127.0.0.1 is never connected to."""
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        server.setblocking(False)
        port = server.getsockname()[1]
        validator = compile_schema({"properties": {"a": {"$ref": f"http://127.0.0.1:{port}/s"}}})
        where = first_error(validator, {"a": 1})
        assert where is not None and "cannot be resolved" in where
        with pytest.raises(BlockingIOError):
            server.accept()


@given(st.lists(json_values, max_size=8))
def test_unique_items_decides_as_jsonschema(items: list[Any]) -> None:
    ours = first_error(compile_schema({"uniqueItems": True}), items) is None
    assert ours == Draft202012Validator({"uniqueItems": True}).is_valid(items)


@given(st.lists(json_values, max_size=5), json_values)
def test_enum_and_const_decide_as_jsonschema(members: list[Any], value: Any) -> None:
    for schema in ({"enum": members}, {"const": members[0] if members else None}):
        ours = first_error(compile_schema(schema), value)
        assert (ours is None) == Draft202012Validator(schema).is_valid(value)
        assert ours is None or len(ours) < 100  # neither the enum nor the value echoed


def test_a_large_unique_array_is_linear_and_a_repeat_named_by_position() -> None:
    items: list[Any] = [{"k": i, "v": [i, str(i)]} for i in range(50_000)]
    budget = Budget(10**6)
    assert first_error(compile_schema({"uniqueItems": True}), items, budget) is None
    assert 10**6 - budget.steps <= 6 * 50_000  # a few steps per item, not one per pair
    items.append({"v": [7, "7"], "k": 7.0})
    where = first_error(compile_schema({"uniqueItems": True}), items, Budget(10**6))
    assert where == "$: item 50000 repeats an earlier item"


def _chain(levels: int) -> dict[str, Any]:
    defs: dict[str, Any] = {f"l{i}": {"anyOf": [{"$ref": f"#/$defs/l{i + 1}"}] * 3}
                            for i in range(levels)}  # fmt: skip
    defs[f"l{levels}"] = {"type": "number"}
    return {"$defs": defs, "$ref": "#/$defs/l0"}


def test_an_exponential_chain_runs_out_of_steps() -> None:
    validator = compile_schema(check_schema(_chain(15)))
    with pytest.raises(OverBudget):
        first_error(validator, "abcdefg", Budget(5_000))
    # Shallow enough, it finishes inside the same budget.
    assert first_error(compile_schema(_chain(3)), 1, Budget(5_000)) is None


def test_items_against_a_huge_enum_is_charged_by_the_enum() -> None:
    validator = compile_schema({"items": {"enum": list(range(10_000))}})
    with pytest.raises(OverBudget):
        first_error(validator, [-1] * 100, Budget(500_000))


class FakeClock:
    def __init__(self) -> None:
        self.now = 100.0
        self.pauses = 0

    def __call__(self) -> float:
        self.now += 0.0001  # each reading: 100 µs of work
        return self.now

    def pause(self) -> None:
        self.pauses += 1


def test_the_deadline_stops_a_check_and_pauses_come_on_time() -> None:
    clock = FakeClock()
    budget = Budget.timed(10**9, clock, 0.05, clock.pause)
    with pytest.raises(OverBudget):
        first_error(compile_schema(_chain(12)), "x", budget)
    # 0.05 s of 100 µs readings, a pause every 0.5 ms: about a hundred.
    assert 50 <= clock.pauses <= 200, clock.pauses
    assert budget.steps > 10**9 - 1000  # the clock, not the steps, ended it


def test_the_metaschema_check_is_budgeted_too() -> None:
    with pytest.raises(BadInput, match="too complex"):
        check_schema({"properties": {"a": {"type": "string"}}}, Budget(2))
