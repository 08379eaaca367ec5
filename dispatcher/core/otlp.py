"""The attempts' spans in OTLP's protobuf form (opentelemetry-proto's
`ExportTraceServiceRequest`, trace/v1), written field by field. Pure.

Why by hand: the exporter's generic encoder builds a message object for
every attribute and event, 80 µs a span here, on the worker's CPU (the
batch processor's thread holds the GIL while it runs); a span of ours has
one shape (a dozen scalar attributes, up to four events), and its bytes
cost a tenth of that. What is written is what that encoder writes for the
same span, field for field (checked against opentelemetry-proto's
decoding in tests/unit/test_otlp.py); fields left at their default are
omitted, as protobuf does.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

# Span.SpanKind and the SpanFlags bits (trace/v1/trace.proto).
KIND_CLIENT = 3
FLAGS_HAS_IS_REMOTE = 0x100
FLAGS_IS_REMOTE = 0x200
# Status.StatusCode
STATUS_UNSET = 0
STATUS_ERROR = 2

AttributeValue = str | bool | int | float | Sequence[str | bool | int | float]


@dataclass(slots=True)
class SpanRecord:
    """One finished span, as the exporter needs it."""

    trace_id: int
    span_id: int
    parent_span_id: int | None
    trace_state: str  # the W3C tracestate value ('' for none)
    name: str
    start_ns: int
    end_ns: int
    attributes: dict[str, AttributeValue]
    events: list[tuple[str, int, dict[str, AttributeValue]]] = field(default_factory=list)
    status: int = STATUS_UNSET
    kind: int = KIND_CLIENT
    flags: int = FLAGS_HAS_IS_REMOTE

    @property
    def context(self) -> SpanRecord:
        # The SDK's batch processor keeps a span when
        # `span.context.trace_flags.sampled`: only sampled spans are made.
        return self

    @property
    def trace_flags(self) -> SpanRecord:
        return self

    @property
    def sampled(self) -> bool:
        return True


_SMALL = [bytes((n,)) for n in range(0x80)]


def _varint(n: int) -> bytes:
    if 0 <= n < 0x80:
        return _SMALL[n]
    if n < 0:
        n += 1 << 64  # int64 as protobuf writes it: two's complement, ten bytes
    out = bytearray()
    while n > 0x7F:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def _tag(number: int, wire_type: int) -> bytes:
    return _varint(number << 3 | wire_type)


# Field tags of a length-delimited field (wire type 2), by field number.
_LEN = [_tag(n, 2) for n in range(17)]


def _len(number: int, payload: bytes) -> bytes:
    return _LEN[number] + _varint(len(payload)) + payload


def _text(number: int, value: str) -> bytes:
    return _len(number, value.encode()) if value else b""


_FIXED64 = struct.Struct("<Q")
_DOUBLE = struct.Struct("<d")
_TRUE, _FALSE = _tag(2, 0) + b"\x01", _tag(2, 0) + b"\x00"
_INT, _DBL = _tag(3, 0), _tag(4, 1)


_F64 = [_tag(n, 1) for n in range(9)]  # fixed64 fields' tags, by field number


def _fixed64(number: int, value: int) -> bytes:
    return _F64[number] + _FIXED64.pack(value) if value else b""


def any_value(value: object) -> bytes:
    """An AnyValue: string 1, bool 2, int 3, double 4, array 5."""
    if isinstance(value, str):
        raw = value.encode()
        return _LEN[1] + _varint(len(raw)) + raw
    if isinstance(value, bool):
        return _TRUE if value else _FALSE
    if isinstance(value, int):
        return _INT + _varint(value)
    if isinstance(value, float):
        return _DBL + _DOUBLE.pack(value)
    if isinstance(value, (list, tuple)):
        return _len(5, b"".join([_len(1, any_value(v)) for v in value]))
    return _len(1, str(value).encode())


# Entries kept in each cache below (attribute names; encoded fields).
CACHED = 4096
_KEYS: dict[str, bytes] = {}


def key_value(key: str, value: object) -> bytes:
    """A KeyValue: key 1 (its bytes made once a name), value 2."""
    head = _KEYS.get(key)
    if head is None:
        head = _len(1, key.encode())
        if len(_KEYS) < CACHED:
            _KEYS[key] = head
    v = any_value(value)
    return head + _LEN[2] + _varint(len(v)) + v


# Most of an attempt's attributes repeat from span to span (the method, the
# endpoint's address, the verdict...): their encoded fields are kept, by
# attribute field number, key, type and value (strings, integers and
# booleans), up to CACHED (then emptied: the unique ones, an event id, pass
# through it).
_FIELDS: dict[tuple[int, str, type, object], bytes] = {}


def attributes(number: int, values: Mapping[str, object]) -> bytes:
    out = []
    for k, v in values.items():
        kind = type(v)
        if kind is not str and kind is not int and kind is not bool:
            # Floats (-0.0 == 0.0, NaN != NaN) and arrays are written each time.
            out.append(_len(number, key_value(k, v)))
            continue
        cache_key = (number, k, kind, v)
        cached = _FIELDS.get(cache_key)
        if cached is not None:
            out.append(cached)
            continue
        field = _len(number, key_value(k, v))
        if len(_FIELDS) >= CACHED:
            _FIELDS.clear()
        _FIELDS[cache_key] = field
        out.append(field)
    return b"".join(out)


def span(s: SpanRecord) -> bytes:
    parts = [
        _len(1, s.trace_id.to_bytes(16, "big")),
        _len(2, s.span_id.to_bytes(8, "big")),
        _text(3, s.trace_state),
    ]
    if s.parent_span_id is not None:
        parts.append(_len(4, s.parent_span_id.to_bytes(8, "big")))
    parts += [
        _text(5, s.name),
        _tag(6, 0) + _varint(s.kind) if s.kind else b"",
        _fixed64(7, s.start_ns),
        _fixed64(8, s.end_ns),
        attributes(9, s.attributes),
    ]
    for name, at, values in s.events:
        parts.append(_len(11, _fixed64(1, at) + _text(2, name) + attributes(3, values)))
    status = _tag(3, 0) + _varint(s.status) if s.status else b""
    parts.append(_len(15, status))
    if s.flags:
        parts.append(_tag(16, 5) + struct.pack("<I", s.flags))
    return b"".join(parts)


def export_request(
    resource: Mapping[str, object],
    scope: tuple[str, str],
    spans: Iterable[SpanRecord],
    *,
    resource_schema_url: str = "",
) -> bytes:
    """ExportTraceServiceRequest with one ResourceSpans and one ScopeSpans
    (every span here has the worker's resource and scope)."""
    name, version = scope
    scope_bytes = _len(1, _text(1, name) + _text(2, version))
    scope_spans = scope_bytes + b"".join(_len(2, span(s)) for s in spans)
    resource_spans = (
        _len(1, attributes(1, resource)) + _len(2, scope_spans) + _text(3, resource_schema_url)
    )
    return _len(1, resource_spans)
