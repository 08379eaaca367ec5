"""Each attempt exported as an OpenTelemetry client span (issue 34, SPEC
"Traces and attempt details"): `dispatcher run --drain` with
OTEL_EXPORTER_OTLP_ENDPOINT set, against a real OTLP/HTTP receiver in the
test decoding what the SDK's exporter sends (opentelemetry-proto). The
producer's trace id reaches the webhook receiver's traceparent and the
exported span; the span is the parent of what the receiver does; its
attributes are OpenTelemetry's HTTP client ones and ours, and nothing in it
is the payload, a header value or a macro value."""

from __future__ import annotations

import asyncio
import sys

import asyncpg
from opentelemetry.proto.trace.v1.trace_pb2 import Span

from tests.helpers import WORKER_ENV, add_endpoint, cli_env, otlp_sink, span_attributes
from tests.receivers import Receiver

TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"
PRODUCER_SPAN = "00f067aa0ba902b7"
SECRET_VALUE = "click-SECRET-7731"


async def _drain(db_url: str, otlp: str, **otel: str) -> None:
    """`dispatcher run --drain` exporting to `otlp`, batches sent within 0.1 s."""
    env = cli_env(db_url, **WORKER_ENV, OTEL_EXPORTER_OTLP_ENDPOINT=otlp,
                  OTEL_BSP_SCHEDULE_DELAY="100", **otel)  # fmt: skip
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "dispatcher", "run", "--drain", env=env,
        stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    _, err = await asyncio.wait_for(proc.communicate(), 60)
    assert proc.returncode == 0, err.decode()[-2000:]


async def test_attempts_are_client_spans_of_the_producers_trace(
    db_url: str, conn: asyncpg.Connection, receiver: Receiver
) -> None:
    runner, otlp, spans = await otlp_sink()
    try:
        ep, _ = await add_endpoint(conn, receiver.url("/pb") + "?click={click}", method="GET")
        await conn.execute(
            "SELECT dispatcher_enqueue('conv', $1::jsonb, 'ev-1', traceparent => $2)",
            f'{{"click": "{SECRET_VALUE}"}}', f"00-{TRACE}-{PRODUCER_SPAN}-01",
        )  # fmt: skip
        await _drain(db_url, otlp)
    finally:
        await runner.cleanup()
    [req] = receiver.received
    _, trace, sent_span, flags = req.headers["traceparent"].split("-")
    assert (trace, flags) == (TRACE, "01")
    [span] = spans
    assert span.trace_id.hex() == TRACE and span.parent_span_id.hex() == PRODUCER_SPAN
    assert span.span_id.hex() == sent_span  # the receiver's work is this span's child
    assert span.kind == Span.SPAN_KIND_CLIENT and span.name == "GET webhook"
    attrs = span_attributes(span)
    assert attrs["http.request.method"] == "GET" and attrs["http.response.status_code"] == 200
    assert attrs["server.address"] == "127.0.0.1" and attrs["url.scheme"] == "http"
    assert attrs["dispatcher.endpoint.id"] == ep and attrs["dispatcher.event.type"] == "conv"
    assert attrs["dispatcher.attempt"] == 1 and attrs["dispatcher.verdict"] == "success"
    assert attrs["dispatcher.breaker.state"] == "closed"
    assert attrs["network.peer.address"] == "127.0.0.1"
    assert all(SECRET_VALUE not in str(v) for v in attrs.values()), attrs
    assert "?" not in str(attrs["url.full"])
    stored = await conn.fetchval("SELECT detail->>'span_id' FROM endpoint_latency")
    assert stored == sent_span
    # The phases as events, at their ends: a new connection to an address
    # (no DNS, no TLS), then the status line.
    assert [e.name for e in span.events] == ["connect", "ttfb"]
    times = [span.start_time_unix_nano, *(e.time_unix_nano for e in span.events)]
    assert times == sorted(times) and times[-1] <= span.end_time_unix_nano
    for e in span.events:
        [kv] = e.attributes
        assert kv.key == "dispatcher.phase.ms" and kv.value.double_value >= 0


async def test_a_configured_sampler_decides_and_the_receiver_sees_its_decision(
    db_url: str, conn: asyncpg.Connection, receiver: Receiver
) -> None:
    """OTEL_TRACES_SAMPLER as the SDK reads it: parent-based on a ratio of
    0, so the producer's sampled trace is followed (exported, flags 01) and
    an event without a producer's trace is not (no span, flags 00)."""
    runner, otlp, spans = await otlp_sink()
    try:
        await add_endpoint(conn, receiver.url("/s"))
        await conn.execute(
            "SELECT dispatcher_enqueue('conv', '{}'::jsonb, 'ev-traced', traceparent => $1,"
            " tracestate => 'vendor=x1')",
            f"00-{TRACE}-{PRODUCER_SPAN}-01",
        )
        await conn.execute("SELECT dispatcher_enqueue('conv', '{}'::jsonb, 'ev-plain')")
        await _drain(db_url, otlp, OTEL_TRACES_SAMPLER="parentbased_traceidratio",
                     OTEL_TRACES_SAMPLER_ARG="0")  # fmt: skip
    finally:
        await runner.cleanup()
    flags = {}
    for req in receiver.received:
        _, trace, _, flag = req.headers["traceparent"].split("-")
        flags[trace == TRACE] = flag
    assert flags == {True: "01", False: "00"}
    [span] = spans
    assert span.trace_id.hex() == TRACE and span.trace_state == "vendor=x1"
