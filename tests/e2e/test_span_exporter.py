"""The span exporter process (worker/tracing.py, worker/spanexport.py): a
worker's attempts reach a real OTLP/HTTP receiver through it with the
attributes, events and status each outcome gives; an exporter that is gone
or stalled costs the event loop nothing (spans are dropped and counted,
never waited for), and a stopping worker's last spans are exported."""

from __future__ import annotations

import asyncio
import os
import signal
from collections.abc import AsyncIterator
from dataclasses import dataclass

import pytest
from opentelemetry.proto.trace.v1.trace_pb2 import Span, Status

from dispatcher.core.models import AttemptResult, Delivery, Verdict
from dispatcher.worker import tracing
from dispatcher.worker.tracing import Tracing
from dispatcher.worker.wire import EndpointWire
from tests.helpers import otlp_sink, span_attributes

TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"
PARENT = "00f067aa0ba902b7"
WIRE = EndpointWire(
    "http://127.0.0.1:8080/hook?click={click}", ("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw",),
    10_000, allow_private=True, app="shop",
)  # fmt: skip


@dataclass
class Sink:
    url: str
    spans: list[Span]


@pytest.fixture
async def sink() -> AsyncIterator[Sink]:
    runner, url, spans = await otlp_sink()
    yield Sink(url, spans)
    await runner.cleanup()


def _tracing(sink: Sink) -> Tracing:
    env = {**os.environ, "OTEL_EXPORTER_OTLP_ENDPOINT": sink.url, "OTEL_BSP_SCHEDULE_DELAY": "50"}
    env.pop("OTEL_TRACES_SAMPLER", None)
    made = Tracing.from_env(env)
    assert made is not None
    return made


def _delivery(n: int, traced: bool = True) -> Delivery:
    return Delivery(
        n, 7, f"evt_{n}", b"{}", 0, 5, "invoice.paid",
        traceparent=f"00-{TRACE}-{PARENT}-01" if traced else None,
        tracestate="vendor=x1" if traced else None,
    )  # fmt: skip


async def test_each_outcome_reaches_the_collector_as_its_span(sink: Sink) -> None:
    t = _tracing(sink)
    await t.open()
    ok = AttemptResult(verdict=Verdict.SUCCESS, status_code=200, response_ms=3,
                       timing=(None, 0.001, None, 0.002), remote_addr="127.0.0.1")  # fmt: skip
    failed = AttemptResult(verdict=Verdict.RETRYABLE, status_code=503, response_ms=2,
                           timing=(None, None, None, 0.001))  # fmt: skip
    refused = AttemptResult(verdict=Verdict.RETRYABLE, status_code=None, response_ms=0,
                            error="connection refused")  # fmt: skip
    sent = {}
    for n, result in ((1, ok), (2, failed), (3, refused), (4, None)):
        span, traceparent = t.start(_delivery(n, traced=n != 3), WIRE, "closed")
        sent[n] = traceparent
        t.end(span, result)
    await t.close()
    assert t._proc.returncode == 0 and t.dropped == 0
    got = {int(str(span_attributes(s)["dispatcher.delivery.id"])): s for s in sink.spans}
    assert sorted(got) == [1, 2, 3, 4]
    for n, s in got.items():
        _, trace, span_id, flags = sent[n].split("-")
        assert (s.trace_id.hex(), s.span_id.hex(), flags) == (trace, span_id, "01")
        assert s.kind == Span.SPAN_KIND_CLIENT and s.name == "POST webhook"
        assert s.start_time_unix_nano <= s.end_time_unix_nano
        a = span_attributes(s)
        assert a["url.full"] == "http://127.0.0.1:8080/hook" and a["server.port"] == 8080
        assert a["dispatcher.application"] == "shop" and a["dispatcher.endpoint.id"] == 7
        assert a["dispatcher.event.id"] == f"evt_{n}" and a["dispatcher.attempt"] == 1
    assert got[1].parent_span_id.hex() == PARENT and got[1].trace_state == "vendor=x1"
    assert got[3].parent_span_id == b"" and got[3].trace_id.hex() != TRACE
    assert span_attributes(got[1])["network.peer.address"] == "127.0.0.1"
    assert got[1].status.code == Status.STATUS_CODE_UNSET
    assert [e.name for e in got[1].events] == ["connect", "ttfb"]
    assert [e.name for e in got[2].events] == ["ttfb"]
    assert span_attributes(got[2])["error.type"] == "503"
    assert span_attributes(got[2])["http.response.status_code"] == 503
    assert span_attributes(got[3])["error.type"] == "connection refused" and not got[3].events
    assert span_attributes(got[4])["error.type"] == "cancelled"
    for n in (2, 3, 4):
        assert got[n].status.code == Status.STATUS_CODE_ERROR


async def test_a_gone_exporter_costs_the_loop_nothing(
    sink: Sink, caplog: pytest.LogCaptureFixture
) -> None:
    t = _tracing(sink)
    await t.open()
    t._proc.kill()
    t._proc.wait()
    for n in range(1, 3000):
        span, _ = t.start(_delivery(n), WIRE, "closed")
        t.end(span, None)
        if n % 500 == 0:
            await asyncio.sleep(0.01)  # the loop sees the pipe close
    assert t._closed
    await asyncio.wait_for(t.close(), 5)
    assert "tracing_exporter_gone" in caplog.text
    assert sink.spans == []


async def test_a_stalled_exporter_has_spans_dropped_and_counted(
    sink: Sink, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(tracing, "MAX_PENDING", 256 * 1024)
    t = _tracing(sink)
    await t.open()
    os.kill(t._proc.pid, signal.SIGSTOP)
    try:
        for n in range(1, 20_001):
            span, _ = t.start(_delivery(n), WIRE, "closed")
            t.end(span, None)
            if n % 1000 == 0:
                await asyncio.sleep(0)
    finally:
        os.kill(t._proc.pid, signal.SIGCONT)
    assert t.dropped > 0
    await asyncio.wait_for(t.close(), 30)
    assert len(sink.spans) == 20_000 - t.dropped
    assert "tracing_dropped" in caplog.text
