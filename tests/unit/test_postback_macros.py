"""Postback macros (SPEC "Postback tooling"): styles, modifiers, value maps,
the new built-ins, and where raw values may stand. Pure."""

from __future__ import annotations

from typing import Any

import pytest

from dispatcher.core.errors import BadInput
from dispatcher.core.shaping import (
    MissingMacro,
    UnmappedValue,
    load_value_map,
    parse_template,
    parse_value_map,
    postback_id,
)

BUILTINS = {
    "event_id": "evt_1", "event_type": "conv", "attempt": "2", "timestamp": "1700000000",
    "postback_id": "p" * 32, "rand": "42", "unix_time_ms": "1700000000123",
}  # fmt: skip
STATUS_MAP = {"status": {"approved": "1", "pending": "2", "declined": "3"}}


def render(url: str, payload: Any, style: str = "brace", vmap: Any = None) -> str:
    return parse_template(url, style).render(payload, BUILTINS, vmap)


@pytest.mark.parametrize(
    ("style", "url"),
    [
        ("brace", "https://p.example/pb?cid={click_id}&t={event_type}"),
        ("hash", "https://p.example/pb?cid=#click_id#&t=#event_type#"),
        ("double", "https://p.example/pb?cid={{click_id}}&t={{event_type}}"),
    ],
)
def test_each_style(style: str, url: str) -> None:
    assert render(url, {"click_id": "a b"}, style) == "https://p.example/pb?cid=a%20b&t=conv"


@pytest.mark.parametrize(
    ("style", "url"),
    [
        ("brace", "https://p.example/pb/{user.id}"),
        ("hash", "https://p.example/pb/#user.id#"),
        ("double", "https://p.example/pb/{{user.id}}"),
    ],
)
def test_each_style_in_the_path(style: str, url: str) -> None:
    assert render(url, {"user": {"id": "../x"}}, style) == "https://p.example/pb/..%2Fx"


@pytest.mark.parametrize(
    ("style", "url", "literal"),
    [
        # Another style's delimiters are literal text.
        ("hash", "https://p.example/pb?a={b}&c=#c#", "https://p.example/pb?a={b}&c=3"),
        ("double", "https://p.example/pb?a=#b#&c={{c}}", "https://p.example/pb?a=#b#&c=3"),
    ],
)
def test_other_styles_are_text(style: str, url: str, literal: str) -> None:
    assert render(url, {"c": 3}, style) == literal


@pytest.mark.parametrize(
    ("url", "payload", "wire"),
    [
        ("{v|default:none}", {}, "none"),
        ("{v|default:none}", {"v": "x"}, "x"),
        ("{v|default:}", {}, ""),
        ("{v|default:a b&c}", {}, "a%20b%26c"),  # a default is encoded like a value
        ("{v|raw}", {"v": "a%20b&c=d"}, "a%20b&c=d"),
        ("{v|raw|default:x%2Fy}", {}, "x%2Fy"),
        ("{v|default:x y|raw}", {}, "x%20y"),  # raw still encodes a space
        ("{a.b|default:0}", {"a": 1}, "0"),
    ],
)
def test_modifiers(url: str, payload: Any, wire: str) -> None:
    assert render("https://p.example/pb?x=" + url, payload) == "https://p.example/pb?x=" + wire


@pytest.mark.parametrize(
    ("value", "wire"),
    [
        # Kept: what a partner's own encoding and query syntax use.
        ("a%2Fb", "a%2Fb"),
        ("k=v&k2=v2", "k=v&k2=v2"),
        ("-._~!$'()*+,;:@/?", "-._~!$'()*+,;:@/?"),
        # Encoded even raw: what would break the request line or start a fragment.
        ("a b", "a%20b"),
        ("a#b", "a%23b"),
        ("a\r\nX: y", "a%0D%0AX:%20y"),
        ("é", "%C3%A9"),
        ('<"`^{|}\\>', "%3C%22%60%5E%7B%7C%7D%5C%3E"),
    ],
)
def test_raw_values(value: str, wire: str) -> None:
    assert (
        render("https://p.example/pb?v={v|raw}", {"v": value}) == f"https://p.example/pb?v={wire}"
    )


# Every reserved and otherwise special character, encoded outside raw.
RESERVED = {
    ":": "%3A", "/": "%2F", "?": "%3F", "#": "%23", "[": "%5B", "]": "%5D", "@": "%40",
    "!": "%21", "$": "%24", "&": "%26", "'": "%27", "(": "%28", ")": "%29", "*": "%2A",
    "+": "%2B", ",": "%2C", ";": "%3B", "=": "%3D", "%": "%25", " ": "%20", '"': "%22",
    "<": "%3C", ">": "%3E", "\\": "%5C", "^": "%5E", "`": "%60", "{": "%7B", "|": "%7C",
    "}": "%7D", "\n": "%0A", ".": "%2E", "..": "%2E%2E",
}  # fmt: skip


@pytest.mark.parametrize("style", ["brace", "hash", "double"])
@pytest.mark.parametrize(("char", "wire"), sorted(RESERVED.items()))
def test_every_reserved_character_is_encoded(style: str, char: str, wire: str) -> None:
    o, c = {"brace": ("{", "}"), "hash": ("#", "#"), "double": ("{{", "}}")}[style]
    got = render(f"https://p.example/m/{o}v{c}?q={o}v{c}", {"v": char}, style)
    assert got == f"https://p.example/m/{wire}?q={wire}"


@pytest.mark.parametrize(
    ("payload", "vmap", "wire"),
    [
        ({"status": "approved"}, STATUS_MAP, "1"),
        ({"status": "declined"}, STATUS_MAP, "3"),
        ({"status": "chargeback"}, {"status": {**STATUS_MAP["status"], "*": "0"}}, "0"),
        ({"status": 1}, {"status": {"1": "sale"}}, "sale"),  # the value's text is the key
        ({"status": "x y"}, {"other": {"a": "b"}}, "x%20y"),  # no map for this macro
        ({"status": "a"}, {"status": {"a": "x&y"}}, "x%26y"),  # a code is encoded too
    ],
)
def test_value_maps(payload: Any, vmap: Any, wire: str) -> None:
    got = render("https://p.example/pb?s={status}", payload, vmap=vmap)
    assert got == f"https://p.example/pb?s={wire}"


def test_unmapped_value_without_a_star() -> None:
    with pytest.raises(UnmappedValue, match=r"^unmapped value: status$"):
        render("https://p.example/pb?s={status}", {"status": "chargeback"}, vmap=STATUS_MAP)
    with pytest.raises(UnmappedValue):
        parse_template("https://p.example/pb?s={status}").check(
            {"status": "chargeback"}, STATUS_MAP
        )


def test_a_default_is_not_mapped() -> None:
    got = render("https://p.example/pb?s={status|default:9}", {}, vmap=STATUS_MAP)
    assert got == "https://p.example/pb?s=9"


def test_missing_without_a_default() -> None:
    with pytest.raises(MissingMacro, match=r"^missing macro: click_id$"):
        parse_template("https://p.example/pb?c={click_id}").check({})
    parse_template("https://p.example/pb?c={click_id|default:}").check({})


def test_new_builtins_win_over_payload_fields() -> None:
    url = "https://p.example/pb?p={postback_id}&r={rand}&ms={unix_time_ms}"
    got = render(url, {"rand": "mine", "postback_id": "mine"})
    assert got == f"https://p.example/pb?p={'p' * 32}&r=42&ms=1700000000123"


def test_postback_id_is_stable_per_delivery() -> None:
    a = postback_id(7, "evt_1")
    assert a == postback_id(7, "evt_1")
    assert len(a) == 32 and a.isalnum()
    assert len({a, postback_id(8, "evt_1"), postback_id(7, "evt_2")}) == 3


@pytest.mark.parametrize(
    ("style", "url", "why"),
    [
        ("brace", "https://p.example/{v|raw}?x=1", "only in the query"),
        ("brace", "https://p.example/a?x=1#{v|raw}", "only in the query"),
        ("hash", "https://p.example/#v|raw#?x=1", "only in the query"),
        ("double", "https://p.example/{{v|raw}}", "only in the query"),
        ("brace", "https://p.example/?x={v|lower}", "unknown modifier"),
        ("brace", "https://p.example/?x={v|raw|raw}", "unknown modifier"),
        ("brace", "https://{host}/?x=1", "not the scheme, host or port"),
        ("hash", "https://#host#.example/?x=1", "not the scheme, host or port"),
        ("hash", "https://p.example:#port#/", "not the scheme, host or port"),
        ("double", "https://{{h}}.example/", "not the scheme, host or port"),
        ("hash", "https://p.example/?x=#v", "unbalanced"),
        ("double", "https://p.example/?x={{v}", "unbalanced"),
        ("double", "https://p.example/?x={v}", "unbalanced"),
        ("brace", "https://p.example/?x={a b}", "a name is"),
        ("brace", "https://p.example/?x={v|default:\x01}", "printable"),
        ("plain", "https://p.example/", "macro_style"),
    ],
)
def test_refused_templates(style: str, url: str, why: str) -> None:
    with pytest.raises(BadInput, match=why):
        parse_template(url, style)


@pytest.mark.parametrize(
    ("given", "error"),
    [
        ("[]", "JSON object"),
        ("not json", "JSON object"),
        ({"a b": {"x": "1"}}, "not a macro name"),
        ({"status": {}}, "non-empty object"),
        ({"status": "1"}, "non-empty object"),
        ({"status": {"a": None}}, "a code is"),
        ({"status": {"a": ["1"]}}, "a code is"),
        ({"s": {str(i): "x" * 20 for i in range(600)}}, "at most 10000"),
    ],
)
def test_value_map_refusals(given: Any, error: str) -> None:
    with pytest.raises(BadInput, match=error):
        parse_value_map(given)


def test_value_map_text_round_trip() -> None:
    text = parse_value_map({"status": {"approved": 1, "*": "0"}})
    assert text == '{"status":{"approved":"1","*":"0"}}'
    assert load_value_map(text) == {"status": {"approved": "1", "*": "0"}}
    assert parse_value_map(None) is None
