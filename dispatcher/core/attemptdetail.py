"""What one attempt records for an operator's debugging (SPEC "Traces and
attempt details"), and the W3C trace context it carries. Pure: no I/O.

The record is one JSON document per attempt (`endpoint_latency.detail`):
timings in milliseconds (`dns`, `connect`, `tls`, `ttfb`, `total`; null
when the phase did not happen, e.g. no DNS or connect on a reused
connection), the receiver's address, its response headers (bounded, with
credentials and cookies redacted), the first EXCERPT_BYTES of its body, and
for a postback the URL as fired. Bounded: at most about 8 KiB an attempt.
"""

from __future__ import annotations

import os
import re
from collections.abc import Hashable, Iterable
from typing import Any

import orjson

EXCERPT_BYTES = 4096
MAX_HEADERS = 32
MAX_HEADER_VALUE = 256
REDACTED = "[redacted]"

# Header names whose values are credentials or session state, whoever sent
# them: never stored, whatever the receiver put in them.
_SECRET_HEADERS = frozenset({
    "set-cookie", "cookie", "set-cookie2", "cookie2", "authorization", "proxy-authorization",
    "proxy-authenticate", "www-authenticate",
})  # fmt: skip
# A URL's user:password in any other header's value (a Location, a Link).
# Possessive and anchored after a non-scheme character, so that a value
# of many dots is one pass, not a rescan from each (a receiver's header
# must never cost the loop); applied to the value already cut.
_USERINFO = re.compile(r"(?i)(?<![a-z0-9+.-])([a-z][a-z0-9+.-]*+:)?//(?:[^/?#\s@]*+@)++")
_SECRET_WORDS = re.compile(r"token|secret|key|auth|session|password|signature", re.I)

_TRACEPARENT = re.compile(r"^([0-9a-f]{2})-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})$")


def valid_traceparent(value: Any) -> str | None:
    """A W3C traceparent as given, or None when it is not one (the
    recommendation: an invalid one is ignored, not an error)."""
    if not isinstance(value, str):
        return None
    m = _TRACEPARENT.match(value.strip().lower())
    if m is None or m.group(1) == "ff" or set(m.group(2)) == {"0"} or set(m.group(3)) == {"0"}:
        return None
    return m.group(0)


def valid_tracestate(value: Any) -> str | None:
    """A tracestate kept as given, bounded as W3C bounds it (512 characters)."""
    if not isinstance(value, str) or not value.strip() or len(value) > 512:
        return None
    return value.strip()


def trace_context(traceparent: Any, tracestate: Any) -> tuple[str | None, str | None]:
    """A producer's (traceparent, tracestate) as stored: each valid or
    None, and no tracestate without a traceparent."""
    parent = valid_traceparent(traceparent)
    return parent, None if parent is None else valid_tracestate(tracestate)


def parent_ids(traceparent: Any) -> tuple[int, int, bool] | None:
    """(trace id, span id, sampled) of a valid traceparent; None otherwise."""
    valid = valid_traceparent(traceparent)
    if valid is None:
        return None
    _, trace_id, span_id, flags = valid.split("-")
    return int(trace_id, 16), int(span_id, 16), bool(int(flags, 16) & 1)


def child_traceparent(parent: str) -> str:
    """The same trace, a new span (this attempt's): version 00."""
    return f"00-{parent[3:35]}-{os.urandom(8).hex()}-{parent[-2:]}"


def redact_headers(items: Iterable[tuple[str, str]]) -> list[list[str]]:
    """Response headers as [name, value] pairs, names lower-cased, at most
    MAX_HEADERS, values cut to MAX_HEADER_VALUE, credentials redacted."""
    out: list[list[str]] = []
    for name, value in items:
        if len(out) == MAX_HEADERS:
            break
        known = _NAMES.get(name)
        if known is None:
            known = _name(name)
        low, secret = known
        if secret:
            out.append([low, REDACTED])
            continue
        value = value[:MAX_HEADER_VALUE]
        if "@" in value:
            value = _USERINFO.sub(rf"\1//{REDACTED}@", value)
        out.append([low, storable(value)])
    return out


# Whole header lists as stored, as JSON, by the headers as received (their
# raw bytes): one endpoint's answers repeat them but for Date, which changes
# once a second, and redact_headers is a loop in Python over each header.
# Bounded: emptied when full.
_LISTS: dict[Hashable, bytes] = {}
LISTS_KEPT = 1024


def redact_headers_of(raw: Hashable, items: Iterable[tuple[str, str]]) -> bytes:
    """redact_headers(items) as JSON, remembered by `raw` (the same headers
    as received): what `answered` puts in the record as it is."""
    got = _LISTS.get(raw)
    if got is None:
        got = orjson.dumps(redact_headers(items))
        if len(_LISTS) >= LISTS_KEPT:
            _LISTS.clear()
        _LISTS[raw] = got
    return got


def secret_header(name: str) -> bool:
    """A header whose value is a credential or session state by its name
    (Authorization, Cookie, X-Api-Key, X-Auth-Token...)."""
    low = name.lower()
    return low in _SECRET_HEADERS or _SECRET_WORDS.search(low) is not None


# Header names as stored and whether their values are secret, by the name
# as received: the same dozen names come back on every answer, and their
# regex search was a third of the record's cost. Bounded: emptied when full.
_NAMES: dict[str, tuple[str, bool]] = {}
NAMES_KEPT = 1024


def _name(name: str) -> tuple[str, bool]:
    low = storable(name.lower())
    known = (low, secret_header(low))
    if len(_NAMES) >= NAMES_KEPT:
        _NAMES.clear()
    _NAMES[name] = known
    return known


def excerpt(body: bytes) -> str:
    """The first EXCERPT_BYTES of a body as text, at most EXCERPT_BYTES
    once stored (bytes that are not UTF-8 replaced, which can triple them;
    a character cut at the edge dropped)."""
    if not body:
        return ""  # most answers to a webhook: nothing to decode
    text = storable(body[:EXCERPT_BYTES].decode("utf-8", errors="replace"))
    raw = text.encode()
    return text if len(raw) <= EXCERPT_BYTES else raw[:EXCERPT_BYTES].decode(errors="ignore")


def storable(text: str) -> str:
    """What a receiver sent, as text jsonb takes: aiohttp keeps a header's
    bytes that are not UTF-8 as lone surrogates (which orjson refuses), and
    jsonb refuses NUL; both become U+FFFD. Either would otherwise fail the
    attempt's record, or every outcome write of the batch it is in."""
    if text.isascii():
        return text.replace("\x00", "\ufffd") if "\x00" in text else text
    try:
        raw = text.encode("utf-8", errors="surrogateescape")
    except UnicodeEncodeError:
        raw = text.encode("utf-8", errors="surrogatepass")
    return raw.decode("utf-8", errors="replace").replace("\x00", "\ufffd")


def encode(
    *,
    dns_s: float | None,
    connect_s: float | None,
    tls_s: float | None,
    ttfb_s: float | None,
    total_s: float,
    remote_addr: str | None = None,
    headers: list[list[str]] | None = None,
    body: str | None = None,
    request_url: str | None = None,
    span_id: str | None = None,
) -> bytes:
    """One attempt's record, as stored (the phases given in seconds, kept
    in milliseconds): for an attempt that got no answer; `answered` writes
    an answer's."""
    timings = {
        "dns": _ms(dns_s),
        "connect": _ms(connect_s),
        "tls": _ms(tls_s),
        "ttfb": _ms(ttfb_s),
        "total": _ms(total_s),
    }
    doc: dict[str, Any] = {
        "timings_ms": timings,
        "remote_addr": remote_addr,
        "response_headers": headers,
        "response_excerpt": body,
    }
    if request_url is not None:
        doc["request_url"] = request_url
    if span_id is not None:
        doc["span_id"] = span_id
    return orjson.dumps(doc)


def answered(
    timing: tuple[float | None, float | None, float | None, float],
    total_s: float,
    remote_addr: str | None,
    headers: bytes,
    body: bytes,
    request_url: str | None = None,
    span_id: str | None = None,
) -> bytes:
    """An answered attempt's record: `encode`'s document for the same
    values, written out in one format. `timing`: (DNS, connect, TLS, first
    byte) in seconds; `headers`: redact_headers_of's JSON; `body`: the
    answer as received (cut to its excerpt here). Every answer makes one,
    and encode's two dicts and keyword call were a third of its cost."""
    dns, connect, tls, ttfb = timing
    if dns is None and connect is None and tls is None:
        phases = _REUSED  # most answers: a connection of the pool's
    else:
        phases = b'"dns":%s,"connect":%s,"tls":%s' % (_num(dns), _num(connect), _num(tls))
    extra = b""
    if request_url is not None:
        extra += b',"request_url":' + orjson.dumps(request_url)
    if span_id is not None:
        extra += b',"span_id":' + orjson.dumps(span_id)
    return _ANSWERED % (
        phases,
        _ms(ttfb),
        _ms(total_s),
        orjson.dumps(remote_addr),
        headers,
        orjson.dumps(excerpt(body)) if body else b'""',
        extra,
    )


_REUSED = b'"dns":null,"connect":null,"tls":null'
# %a: a float's repr, which is JSON for the finite, non-negative numbers
# _ms gives.
_ANSWERED = (
    b'{"timings_ms":{%s,"ttfb":%a,"total":%a},"remote_addr":%s,'
    b'"response_headers":%s,"response_excerpt":%s%s}'
)


def _num(seconds: float | None) -> bytes:
    return b"null" if seconds is None else b"%a" % _ms(seconds)


def _ms(seconds: float | None) -> float | None:
    # Tenths as an integer, then divided: round(x, 1) goes through a
    # decimal string (dtoa and printf): ~3,000 instructions an attempt.
    return None if seconds is None else round(seconds * 10_000) / 10


EMPTY_TIMINGS = {"dns": None, "connect": None, "tls": None, "ttfb": None, "total": None}


def shown(detail: Any, response_ms: int | None) -> dict[str, Any]:
    """An attempt's record as the API shows it: every field present (null
    when not recorded, as for attempts from before schema 024)."""
    doc = orjson.loads(detail) if isinstance(detail, str | bytes) else (detail or {})
    timings = doc.get("timings_ms") or {**EMPTY_TIMINGS, "total": response_ms}
    headers = doc.get("response_headers")
    return {
        "timings_ms": timings,
        "remote_addr": doc.get("remote_addr"),
        "response_headers": None if headers is None else dict(headers),
        "response_excerpt": doc.get("response_excerpt"),
        "request_url": doc.get("request_url"),
        # The attempt's span in the producer's trace (its traceparent's),
        # to match the receiver's logs with ours.
        "span_id": doc.get("span_id"),
    }


def attempt_doc(attempt: dict[str, Any]) -> dict[str, Any]:
    """An attempt row (as a dict, its `detail` the stored record) as the
    API and the CLI show it: at, status, ms, error and the record's fields."""
    out = {k: v for k, v in attempt.items() if k not in ("delivery_id", "detail")}
    out.update(shown(attempt.get("detail"), attempt.get("response_ms")))
    return out
