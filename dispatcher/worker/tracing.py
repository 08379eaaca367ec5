"""Each attempt as an OpenTelemetry client span (SPEC "Traces and attempt
details"), when asked for: `OTEL_EXPORTER_OTLP_ENDPOINT` (or
`OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`) set and the `otel` extra installed
(`pip install 'dispatcher[otel]'`). Off otherwise, and then this module
costs nothing: the sender sends the producer's trace on with a span id of
its own (core.attemptdetail.child_traceparent) and exports nothing.

The SDK is configured by the standard variables: the exporter's endpoint,
headers and timeout (`OTEL_EXPORTER_OTLP_*`), the sampler
(`OTEL_TRACES_SAMPLER`, default parent-based always-on: an attempt follows
its producer's sampling decision, and one without a producer's trace is
sampled), `OTEL_SERVICE_NAME` (default `dispatcher`) and
`OTEL_RESOURCE_ATTRIBUTES`. Spans are batched and exported by the SDK's
thread, never on the event loop.

What a span carries: OpenTelemetry's HTTP client attributes (method, the
endpoint's scheme, host, port and path: never its query, which a postback
fills with macro values, nor credentials), the status code, `error.type`
(our error class), the peer address, and ours: the endpoint, application,
event type, event and delivery ids, attempt number, breaker state and
verdict. Never a payload, a header value, a secret or a macro value.
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
from collections.abc import Mapping
from typing import Any

from dispatcher import log
from dispatcher.core.models import AttemptResult, Delivery, Timing, Verdict
from dispatcher.version import __version__
from dispatcher.worker.wire import EndpointWire


def wanted(env: Mapping[str, str]) -> bool:
    if (env.get("OTEL_SDK_DISABLED") or "").strip().lower() == "true":
        return False
    return bool(
        env.get("OTEL_EXPORTER_OTLP_ENDPOINT") or env.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
    )


class Tracing:
    """The tracer attempts start their spans with, and its provider."""

    def __init__(self, provider: Any) -> None:
        from opentelemetry.trace import SpanKind, Status, StatusCode
        from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

        self._provider = provider
        self._tracer = provider.get_tracer("dispatcher", __version__)
        self._propagator = TraceContextTextMapPropagator()
        self._client = SpanKind.CLIENT
        self._error = Status(StatusCode.ERROR)

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> Tracing | None:
        """A tracer exporting over OTLP/HTTP when the variables ask for one
        and the SDK is installed; None otherwise (said once when asked for
        and missing)."""
        env = os.environ if env is None else env
        if not wanted(env):
            return None
        try:
            from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
            from opentelemetry.sdk.resources import Resource
            from opentelemetry.sdk.trace import TracerProvider
            from opentelemetry.sdk.trace.export import BatchSpanProcessor
        except ImportError:
            log.event("tracing_unavailable", logging.WARNING,
                      reason="OTEL_EXPORTER_OTLP_ENDPOINT is set but the otel extra is not "
                             "installed: pip install 'dispatcher[otel]'")  # fmt: skip
            return None
        service = env.get("OTEL_SERVICE_NAME") or "dispatcher"
        provider = TracerProvider(resource=Resource.create({"service.name": service}))
        provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
        return cls(provider)

    def start(self, d: Delivery, wire: EndpointWire, breaker: str | None = None) -> tuple[Any, str]:
        """The attempt's span, started now, and the traceparent that makes
        the receiver's work its child. `breaker`: the endpoint's breaker
        state the attempt went under (`closed`, or `half_open` for a trial)."""
        parent = None
        if d.traceparent is not None:
            carrier = {"traceparent": d.traceparent}
            if d.tracestate is not None:
                carrier["tracestate"] = d.tracestate
            parent = self._propagator.extract(carrier)
        target = wire.target
        attributes = {
            "http.request.method": wire.method,
            "url.scheme": target.scheme,
            "server.address": target.host or "",
            "server.port": target.port or 0,
            "url.full": str(target.with_query(None).with_user(None).with_fragment(None)),
            "dispatcher.endpoint.id": d.endpoint_id,
            "dispatcher.application": wire.app,
            "dispatcher.event.type": d.event_type,
            "dispatcher.event.id": d.event_id,
            "dispatcher.delivery.id": d.id,
            "dispatcher.attempt": d.attempt_count + 1,
        }
        if breaker is not None:
            attributes["dispatcher.breaker.state"] = breaker
        span = self._tracer.start_span(
            f"{wire.method} webhook", context=parent, kind=self._client, attributes=attributes,
            start_time=time.time_ns(),
        )  # fmt: skip
        ctx = span.get_span_context()
        return span, f"00-{ctx.trace_id:032x}-{ctx.span_id:016x}-{int(ctx.trace_flags):02x}"

    def end(self, span: Any, result: AttemptResult | None) -> None:
        """Ends the span with what the attempt saw (None: it was cut short)."""
        if result is None:
            span.set_attribute("error.type", "cancelled")
            span.set_status(self._error)
            span.end()
            return
        if result.status_code is not None:
            span.set_attribute("http.response.status_code", result.status_code)
        if result.remote_addr is not None:
            span.set_attribute("network.peer.address", result.remote_addr)
        span.set_attribute("dispatcher.verdict", result.verdict.value)
        if result.timing is not None:
            _phase_events(span, result.timing)
        if result.verdict is not Verdict.SUCCESS:
            error = result.error or (
                str(result.status_code) if result.status_code is not None else "failed"
            )
            span.set_attribute("error.type", error)
            span.set_status(self._error)
        span.end()

    async def close(self) -> None:
        """Exports what is still batched (the SDK's own bounded wait)."""
        await asyncio.to_thread(self._provider.shutdown)


PHASES = ("dns", "connect", "tls")


def _phase_events(span: Any, timing: Timing) -> None:
    """An event at the end of each phase the attempt went through (as
    Convoy's client span has): `dns`, `connect`, `tls` when it opened a
    connection, then `ttfb` when the status line came; each with the
    phase's own length (`dispatcher.phase.ms`). The phases run one after
    the other from the span's start, so their ends are running sums."""
    *opening, ttfb = timing
    start: int = span.start_time
    at = 0.0
    for name, took in zip(PHASES, opening, strict=True):
        if took is not None:
            at += took
            span.add_event(name, {"dispatcher.phase.ms": round(took * 1000, 3)},
                           timestamp=start + int(at * 1e9))  # fmt: skip
    span.add_event("ttfb", {"dispatcher.phase.ms": round(ttfb * 1000, 3)},
                   timestamp=start + int(max(ttfb, at) * 1e9))  # fmt: skip
