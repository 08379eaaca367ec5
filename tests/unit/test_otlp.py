"""core.otlp writes what the OTLP exporter's own encoder writes for the
same span (opentelemetry-proto decodes both; the messages must be equal)."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import Event, ReadableSpan
from opentelemetry.sdk.util.instrumentation import InstrumentationScope
from opentelemetry.trace import SpanContext, SpanKind, Status, StatusCode, TraceFlags, TraceState

from dispatcher.core import otlp

RESOURCE = Resource.create({"service.name": "dispatcher", "deployment": "test"})
SCOPE = ("dispatcher", "1.2.3")

values = st.one_of(
    st.text(max_size=40),
    st.booleans(),
    st.integers(min_value=-(2**63), max_value=2**63 - 1),
    st.floats(allow_nan=False),
)
attrs: st.SearchStrategy[dict[str, otlp.AttributeValue]] = st.dictionaries(
    st.text(min_size=1, max_size=20), values, max_size=12
)
ids = st.integers(min_value=1)


def _sdk(r: otlp.SpanRecord) -> ReadableSpan:
    state = TraceState.from_header([r.trace_state]) if r.trace_state else None
    ctx = SpanContext(r.trace_id, r.span_id, False, TraceFlags(1), state)
    parent = (
        SpanContext(r.trace_id, r.parent_span_id, True, TraceFlags(1))
        if r.parent_span_id is not None
        else None
    )
    status = Status(StatusCode.ERROR if r.status == otlp.STATUS_ERROR else StatusCode.UNSET)
    return ReadableSpan(
        r.name, ctx, parent, RESOURCE, dict(r.attributes),
        [Event(n, dict(a), t) for n, t, a in r.events], kind=SpanKind.CLIENT, status=status,
        start_time=r.start_ns, end_time=r.end_ns,
        instrumentation_scope=InstrumentationScope(*SCOPE),
    )  # fmt: skip


def _decoded(data: bytes) -> Any:
    msg = ExportTraceServiceRequest()
    msg.ParseFromString(data)
    return msg


def _ours(records: list[otlp.SpanRecord]) -> Any:
    return _decoded(
        otlp.export_request(
            RESOURCE.attributes, SCOPE, records, resource_schema_url=RESOURCE.schema_url
        )
    )


def _theirs(records: list[otlp.SpanRecord]) -> Any:
    return _decoded(encode_spans([_sdk(r) for r in records]).SerializePartialToString())


@st.composite
def records(draw: st.DrawFn) -> otlp.SpanRecord:
    parent = draw(st.one_of(st.none(), st.integers(min_value=1, max_value=2**64 - 1)))
    events = draw(
        st.lists(
            st.tuples(
                st.sampled_from(["dns", "connect", "tls", "ttfb"]),
                st.integers(min_value=1, max_value=2**63),
                attrs,
            ),
            max_size=4,
        )
    )
    return otlp.SpanRecord(
        trace_id=draw(st.integers(min_value=1, max_value=2**128 - 1)),
        span_id=draw(st.integers(min_value=1, max_value=2**64 - 1)),
        parent_span_id=parent,
        trace_state=draw(st.sampled_from(["", "vendor=a1", "a=1,b=two"])) if parent else "",
        name=draw(st.sampled_from(["POST webhook", "GET webhook"])),
        start_ns=draw(st.integers(min_value=1, max_value=2**63)),
        end_ns=draw(st.integers(min_value=1, max_value=2**63)),
        attributes=draw(attrs),
        events=events,
        status=draw(st.sampled_from([otlp.STATUS_UNSET, otlp.STATUS_ERROR])),
        flags=otlp.FLAGS_HAS_IS_REMOTE | (otlp.FLAGS_IS_REMOTE if parent else 0),
    )


@settings(max_examples=300, deadline=None)
@given(st.lists(records(), min_size=1, max_size=5))
def test_the_request_decodes_to_what_the_exporters_encoder_writes(
    spans: list[otlp.SpanRecord],
) -> None:
    assert _ours(spans) == _theirs(spans)


def test_an_attempts_span_as_the_worker_makes_it() -> None:
    record = otlp.SpanRecord(
        0x0AF7651916CD43DD8448EB211C80319C, 0x00F067AA0BA902B7, 0xB7AD6B7169203331, "a=1",
        "POST webhook", 1_700_000_000_000_000_000, 1_700_000_000_004_000_000,
        {"http.request.method": "POST", "server.port": 8080, "dispatcher.attempt": 1,
         "http.response.status_code": 200, "dispatcher.verdict": "success"},
        [("connect", 1_700_000_000_001_000_000, {"dispatcher.phase.ms": 1.0}),
         ("ttfb", 1_700_000_000_003_000_000, {"dispatcher.phase.ms": 3.0})],
        flags=otlp.FLAGS_HAS_IS_REMOTE | otlp.FLAGS_IS_REMOTE,
    )  # fmt: skip
    ours = _ours([record])
    assert ours == _theirs([record])
    span = ours.resource_spans[0].scope_spans[0].spans[0]
    assert span.trace_id.hex() == "0af7651916cd43dd8448eb211c80319c"
    assert span.parent_span_id.hex() == "b7ad6b7169203331"
    assert [e.name for e in span.events] == ["connect", "ttfb"]
    assert span.kind == 3 and span.flags == 0x300


def test_a_record_passes_the_batch_processors_sampled_check() -> None:
    record = otlp.SpanRecord(1, 2, None, "", "GET webhook", 1, 2, {})
    assert record.context and record.context.trace_flags.sampled


def test_the_field_cache_emptied_when_full_changes_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(otlp, "CACHED", 3)
    spans = [
        otlp.SpanRecord(i + 1, i + 2, None, "", "POST webhook", 10, 20,
                        {"a": "same", "b": i, "c": True, "d": f"ev-{i}", "e": 0.5})
        for i in range(20)
    ]  # fmt: skip
    assert _ours(spans) == _theirs(spans)
