"""The attempt record and the W3C trace context (core/attemptdetail.py):
pure, no I/O."""

from __future__ import annotations

import orjson
from hypothesis import given
from hypothesis import strategies as st

from dispatcher.core import attemptdetail as ad

PARENT = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
HEX = st.text(alphabet="0123456789abcdef", min_size=1, max_size=40)


def test_valid_traceparents_and_the_ones_ignored() -> None:
    assert ad.valid_traceparent(PARENT) == PARENT
    assert ad.valid_traceparent(PARENT.upper()) == PARENT
    for bad in (None, 7, "", "00-xyz", PARENT + "-00", "ff" + PARENT[2:],
                f"00-{'0' * 32}-b7ad6b7169203331-01", f"00-{'a' * 32}-{'0' * 16}-01"):  # fmt: skip
        assert ad.valid_traceparent(bad) is None, bad


@given(st.from_regex(r"\A[0-9a-f]{2}-[0-9a-f]{32}-[0-9a-f]{16}-[0-9a-f]{2}\Z"))
def test_a_child_keeps_the_trace_and_flags_with_a_new_span(parent: str) -> None:
    child = ad.child_traceparent(parent)
    assert child[:3] == "00-" and child[3:35] == parent[3:35] and child[-2:] == parent[-2:]
    assert ad.valid_traceparent(child) == child or set(parent[3:35]) == {"0"}
    assert len(child.split("-")[2]) == 16


@given(st.lists(st.tuples(st.text(min_size=1, max_size=30), st.text(max_size=600)), max_size=60))
def test_headers_are_bounded_and_credentials_never_kept(items: list[tuple[str, str]]) -> None:
    out = ad.redact_headers(items)
    assert len(out) <= ad.MAX_HEADERS
    for (name, _), (low, kept) in zip(items, out, strict=False):
        assert low == ad.storable(name.lower()) and len(kept) <= ad.MAX_HEADER_VALUE
        if low in ("set-cookie", "authorization") or "token" in low or "key" in low:
            assert kept == ad.REDACTED


def test_the_record_round_trips_as_the_api_shows_it() -> None:
    raw = ad.encode(dns_s=None, connect_s=0.001234, tls_s=None, ttfb_s=0.003, total_s=0.0035,
                    remote_addr="127.0.0.1", headers=[["x-a", "1"]], body=ad.excerpt(b"\xffok"),
                    request_url="https://p.example/?c=1", span_id="b7ad6b7169203331")  # fmt: skip
    shown = ad.shown(raw, 3)
    assert shown["timings_ms"] == {"dns": None, "connect": 1.2, "tls": None, "ttfb": 3.0,
                                   "total": 3.5}  # fmt: skip
    assert shown["response_headers"] == {"x-a": "1"} and shown["response_excerpt"] == "\ufffdok"
    assert shown["request_url"] == "https://p.example/?c=1"
    # An attempt from before schema 024: its total only.
    assert ad.shown(None, 12)["timings_ms"] == {**ad.EMPTY_TIMINGS, "total": 12}
    assert len(ad.excerpt(b"x" * 10_000)) == ad.EXCERPT_BYTES
    assert orjson.loads(raw)["span_id"] == "b7ad6b7169203331"


@given(HEX)
def test_tracestate_is_bounded(value: str) -> None:
    assert ad.valid_tracestate(value) == value
    assert ad.valid_tracestate("x" * 513) is None and ad.valid_tracestate("  ") is None


def test_parent_ids_read_a_valid_traceparent_only() -> None:
    trace, span = "0af7651916cd43dd8448eb211c80319c", "b7ad6b7169203331"
    assert ad.parent_ids(f"00-{trace}-{span}-01") == (
        int(trace, 16),
        int(span, 16),
        True,
    )
    assert ad.parent_ids(f" 01-{trace.upper()}-{span}-00 ") == (
        int(trace, 16), int(span, 16), False,
    )  # fmt: skip
    for bad in (None, "", f"ff-{trace}-{span}-01", f"00-{'0' * 32}-{span}-01", f"00-{trace}-x-01"):
        assert ad.parent_ids(bad) is None


@given(
    st.binary(max_size=3 * ad.EXCERPT_BYTES)
    | st.builds(lambda t, b: t.encode() + b, st.text(max_size=ad.EXCERPT_BYTES), st.binary())
)
def test_an_excerpt_is_bounded_once_stored_and_jsonb_takes_it(body: bytes) -> None:
    text = ad.excerpt(body)
    assert len(text.encode()) <= ad.EXCERPT_BYTES
    assert "\x00" not in text
    assert orjson.loads(orjson.dumps(text)) == text
    assert len(ad.excerpt(("\U0001f600" * 1000).encode() + b"\xff" * 96).encode()) <= 4096
    if body[: ad.EXCERPT_BYTES].isascii() and b"\x00" not in body:
        assert text == body[: ad.EXCERPT_BYTES].decode()


@given(st.lists(st.tuples(st.binary(min_size=1, max_size=20), st.binary(max_size=40)), max_size=5))
def test_headers_as_aiohttp_decodes_them_always_make_a_record(
    raw: list[tuple[bytes, bytes]],
) -> None:
    # aiohttp keeps a header's bytes that are not UTF-8 as lone surrogates
    # (surrogateescape): a 200 with `X-Name: caf\xe9` once failed the attempt.
    items = [
        (k.decode("utf-8", "surrogateescape"), v.decode("utf-8", "surrogateescape")) for k, v in raw
    ]
    record = ad.encode(dns_s=None, connect_s=None, tls_s=None, ttfb_s=0.01, total_s=0.02,
                       headers=ad.redact_headers(items), body=ad.excerpt(b"ok"))  # fmt: skip
    assert b"\\u0000" not in record
    assert len(orjson.loads(record)["response_headers"]) == len(items)


def test_credentials_in_other_headers_values_are_redacted() -> None:
    got = dict(
        ad.redact_headers([
            ("Location", "https://user:pw@h.example/next?a=b@c"),
            ("Set-Cookie2", "sid=1"),
            ("Link", "<http://bob@h.example/>; rel=next"),
            ("X-Mail", "ops@example.com"),
            ("Content-Location", "//u:p@ss@h.example/x"),
        ])
    )  # fmt: skip
    assert got["location"] == "https://[redacted]@h.example/next?a=b@c"
    assert got["set-cookie2"] == ad.REDACTED
    assert got["link"] == "<http://[redacted]@h.example/>; rel=next"
    assert got["x-mail"] == "ops@example.com"  # no URL: nothing to redact
    assert got["content-location"] == "//[redacted]@h.example/x"  # to the last @


def test_header_lists_are_remembered_by_the_headers_as_received() -> None:
    """The same raw headers give the same stored list, computed once;
    other headers their own; the memory is emptied when full."""
    raw = ((b"Content-Type", b"text/plain"), (b"Set-Cookie", b"s=1"))
    items = [("Content-Type", "text/plain"), ("Set-Cookie", "s=1")]
    first = ad.redact_headers_of(raw, items)
    assert orjson.loads(first) == ad.redact_headers(items)
    assert orjson.loads(first)[1] == ["set-cookie", ad.REDACTED]
    assert ad.redact_headers_of(raw, []) is first  # not computed again
    other = ((b"Date", b"x"),)
    assert orjson.loads(ad.redact_headers_of(other, [("Date", "x")])) == [["date", "x"]]
    for i in range(ad.LISTS_KEPT):
        ad.redact_headers_of((b"X-N", str(i).encode()), [("X-N", str(i))])
    assert len(ad._LISTS) <= ad.LISTS_KEPT
    assert ad.redact_headers_of(raw, []) == b"[]"  # forgotten when full: what it is given now


SECONDS = st.none() | st.floats(min_value=0, max_value=1e7, allow_nan=False)


@given(
    st.tuples(SECONDS, SECONDS, SECONDS, st.floats(min_value=0, max_value=1e7)),
    st.floats(min_value=0, max_value=1e7),
    st.none() | st.sampled_from(["127.0.0.1", "::1", "2001:db8::7"]),
    st.lists(st.tuples(st.text(min_size=1, max_size=12), st.text(max_size=40)), max_size=6),
    st.binary(max_size=64) | st.text(max_size=64).map(str.encode),
    st.none() | st.text(max_size=40),
    st.none() | HEX,
)
def test_an_answers_record_is_the_document_encode_makes(
    timing: tuple[float | None, float | None, float | None, float],
    total: float,
    remote: str | None,
    items: list[tuple[str, str]],
    body: bytes,
    url: str | None,
    span: str | None,
) -> None:
    """`answered` writes its record in one format, for speed: the same
    document as encode's, field for field, for any values."""
    dns, connect, tls, ttfb = timing
    got = ad.answered(timing, total, remote, ad.redact_headers_of(object(), items), body, url, span)
    want = ad.encode(dns_s=dns, connect_s=connect, tls_s=tls, ttfb_s=ttfb, total_s=total,
                     remote_addr=remote, headers=ad.redact_headers(items), body=ad.excerpt(body),
                     request_url=url, span_id=span)  # fmt: skip
    assert orjson.loads(got) == orjson.loads(want)
