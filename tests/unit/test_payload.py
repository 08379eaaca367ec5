"""Payload text for the producer API (pure)."""

from __future__ import annotations

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from dispatcher.core.errors import BadInput
from dispatcher.ops.inputs import payload_text

json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**53), 2**53) | st.text(max_size=20),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=20,
)


def test_text_is_kept_byte_for_byte() -> None:
    raw = '{ "b":1,  "a" : [1.50, "x"] }'
    assert payload_text(raw) == raw
    assert payload_text(raw.encode()) == raw


@pytest.mark.parametrize("bad", ["", "{", "nope", b"\xff", "{'a': 1}"])
def test_invalid_json_is_bad_input(bad: str | bytes) -> None:
    with pytest.raises(BadInput):
        payload_text(bad)


def test_unencodable_value_is_bad_input() -> None:
    with pytest.raises(BadInput):
        payload_text({"x": object()})


@given(st.dictionaries(st.text(max_size=8), json_values, max_size=5) | st.lists(json_values))
def test_values_round_trip(value: object) -> None:
    # A str is taken as JSON text (kept exactly), so values here are containers.
    assert orjson.loads(payload_text(value)) == value
