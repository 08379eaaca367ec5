"""URL macros, form bodies and success-body checks (pure)."""

from __future__ import annotations

from typing import Any
from urllib.parse import parse_qsl, unquote

import pytest
from hypothesis import given
from hypothesis import strategies as st
from yarl import URL

from dispatcher.core.errors import BadInput
from dispatcher.core.shaping import (
    MissingMacro,
    body_matches,
    compile_success_body,
    encode,
    form_body,
    parse_template,
    scalar_text,
)

BUILTINS = {"event_id": "evt_1", "event_type": "conv", "attempt": "2", "timestamp": "1700000000"}
UNRESERVED = set("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-._~")

# Any JSON value orjson reads from a payload: text without lone surrogates.
text = st.text(st.characters(blacklist_categories=("Cs",)), max_size=40)
json_scalars = (
    st.none()
    | st.booleans()
    | st.integers(-(2**63), 2**64 - 1)
    | text
    | st.floats(allow_nan=False, allow_infinity=False)
)


def render(url: str, payload: Any) -> str:
    return parse_template(url).render(payload, BUILTINS)


@pytest.mark.parametrize(
    ("value", "wire"),
    [
        ("a b", "a%20b"),
        ("a+b&c=d/e?f#g", "a%2Bb%26c%3Dd%2Fe%3Ff%23g"),
        ("é", "%C3%A9"),
        ("-._~", "-._~"),
        (12, "12"),
        (1.5, "1.5"),
        (True, "true"),
        (False, "false"),
        (None, ""),
        ({"x": 1}, "%7B%22x%22%3A1%7D"),
    ],
)
def test_values_are_encoded_as_the_spec_says(value: Any, wire: str) -> None:
    assert render("https://p.example/pb?v={v}", {"v": value}) == f"https://p.example/pb?v={wire}"


def test_a_postback_url() -> None:
    url = "https://track.partner.example/postback?click={click_id}&payout={payout}&e={event_id}&n={attempt}&t={timestamp}&ty={event_type}"
    payload = {"click_id": "abc 123", "payout": 12.5}
    assert render(url, payload) == (
        "https://track.partner.example/postback?click=abc%20123&payout=12.5&e=evt_1&n=2"
        "&t=1700000000&ty=conv"
    )


def test_nested_fields_and_path_macros() -> None:
    url = "https://p.example/c/{user.id}/{user.tags}?x=1"
    got = render(url, {"user": {"id": "u/1", "tags": ["a", "b"]}})
    assert got == "https://p.example/c/u%2F1/%5B%22a%22%2C%22b%22%5D?x=1"


def test_builtins_win_over_payload_fields() -> None:
    assert render("https://p.example/?e={event_id}", {"event_id": "mine"}) == (
        "https://p.example/?e=evt_1"
    )


@pytest.mark.parametrize(
    ("payload", "missing"),
    [
        ({}, "click_id"),
        ({"click_id": 1}, "a.b"),
        ({"click_id": 1, "a": 5}, "a.b"),
        ({"click_id": 1, "a": {"c": 1}}, "a.b"),
        ([1, 2], "click_id"),
        ("text", "click_id"),
    ],
)
def test_a_missing_field_names_the_macro(payload: Any, missing: str) -> None:
    with pytest.raises(MissingMacro) as exc:
        render("https://p.example/?c={click_id}&b={a.b}", payload)
    assert str(exc.value) == f"missing macro: {missing}"


@pytest.mark.parametrize(
    "url",
    [
        "https://p.example/?c={click_id",
        "https://p.example/?c=click_id}",
        "https://p.example/?c={}",
        "https://p.example/?c={a-b}",
        "https://p.example/?c={a b}",
        "https://p.example/?c={.a}",
        "https://p.example/?c={a..b}",
        "https://p.example/?c={{a}}",
        "https://{host}/x",
        "https://p.example:{port}/x",
        "{scheme}://p.example/x",
        "https://user{x}@p.example/x",
        "https://p{x}.example/x",
    ],
)
def test_bad_templates_are_refused(url: str) -> None:
    with pytest.raises(BadInput):
        parse_template(url)


def test_a_url_without_macros_is_kept_as_is() -> None:
    t = parse_template("https://p.example/a%20b?x=1")
    assert not t.has_macros and t.render({}, BUILTINS) == "https://p.example/a%20b?x=1"
    assert parse_template("https://p.example/{a}").sample() == "https://p.example/x"


@given(text)
def test_encoding_leaves_only_unreserved_and_escapes(value: str) -> None:
    wire = encode(value)
    assert set(wire.replace("%", "")) <= UNRESERVED
    assert unquote(wire, errors="strict") == value


@given(st.dictionaries(st.sampled_from(["a", "b", "c"]), json_scalars, min_size=3, max_size=3))
def test_any_value_round_trips_and_the_host_never_changes(payload: dict[str, Any]) -> None:
    # As the sender reads it: yarl, the parser aiohttp sends with.
    url = URL(render("https://p.example:8443/pb/{a}?x={b}&y={c}", payload), encoded=True)
    assert (url.scheme, url.host, url.port) == ("https", "p.example", 8443)
    assert unquote(url.raw_path.removeprefix("/pb/")) == scalar_text(payload["a"])
    query = dict(parse_qsl(url.raw_query_string, keep_blank_values=True))
    assert set(query) == {"x", "y"}
    assert query["x"] == scalar_text(payload["b"]) and query["y"] == scalar_text(payload["c"])


@given(st.text(max_size=60))
def test_parsing_never_fails_other_than_bad_input(url: str) -> None:
    try:
        t = parse_template(url)
    except BadInput as exc:
        assert "\n" not in str(exc)
        return
    # Literal text and macros put back together give the template again.
    assert t._join([f"{{{n}}}" for n in t.names]) == url


def test_form_bodies_carry_top_level_scalars() -> None:
    body = form_body({"click id": "a b", "payout": 1.5, "ok": True, "none": None, "n": {"x": 1},
                      "l": [1]})  # fmt: skip
    assert body == b"click%20id=a%20b&payout=1.5&ok=true&none="
    assert form_body([1, 2]) == b""


@given(st.dictionaries(text, json_scalars, max_size=6))
def test_form_bodies_round_trip(payload: dict[str, Any]) -> None:
    got = parse_qsl(form_body(payload).decode(), keep_blank_values=True, strict_parsing=False)
    assert got == [(k, scalar_text(v)) for k, v in payload.items()]


def test_success_body() -> None:
    pattern = compile_success_body(r'"success"\s*:\s*true')
    assert pattern is not None
    assert body_matches(pattern, b'{"success": true}')
    assert not body_matches(pattern, b'{"success": false}')
    # Only the first 4 KiB is read.
    assert not body_matches(pattern, b" " * 4096 + b'{"success": true}')
    assert compile_success_body(None) is None
    for bad in ("(", "", "x" * 1001):
        with pytest.raises(BadInput):
            compile_success_body(bad)


def test_numbers_render_as_json_writes_them() -> None:
    from dispatcher.worker.wire import load_payload

    doc = load_payload(b'{"id": 123456789012345678901234567890, "f": 1e2, "g": 12.50, "h": 1e21}')
    # A long numeric click id keeps every digit (orjson read it as a float).
    assert scalar_text(doc["id"]) == "123456789012345678901234567890"
    assert [scalar_text(doc[k]) for k in ("f", "g", "h")] == ["100", "12.5", "1e+21"]
    assert scalar_text(-0.0) == "0" and scalar_text(True) == "true"
