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
import random
import time
from collections.abc import Mapping
from typing import Any
from urllib.parse import unquote

from dispatcher import log
from dispatcher.core import attemptdetail
from dispatcher.core.models import AttemptResult, Delivery, Timing, Verdict
from dispatcher.core.otlp import (
    FLAGS_HAS_IS_REMOTE,
    FLAGS_IS_REMOTE,
    STATUS_ERROR,
    SpanRecord,
    export_request,
)
from dispatcher.version import __version__
from dispatcher.worker.wire import EndpointWire

# The batch processor's queue and export batch, unless OTEL_BSP_* set them.
BSP_QUEUE = 16384
BSP_BATCH = 2048


def wanted(env: Mapping[str, str]) -> bool:
    if (env.get("OTEL_SDK_DISABLED") or "").strip().lower() == "true":
        return False
    return bool(
        env.get("OTEL_EXPORTER_OTLP_ENDPOINT") or env.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
    )


class Tracing:
    """Spans for attempts, made whole when the attempt ends and handed to
    the SDK's batch processor, which hands them to its OTLP/HTTP exporter
    (configured by `OTEL_EXPORTER_OTLP_*`, `OTEL_BSP_*`), encoded by
    core.otlp. Not the SDK's recording `Span` nor its generic encoder:
    together they cost 60 % more CPU per delivery at 100 % sampling
    (BENCHMARKS, issue 34). The sampler is the SDK's (`OTEL_TRACES_SAMPLER`);
    its default, parent-based always-on, is decided here without it."""

    def __init__(self, provider: Any, processor: Any, *, default_sampler: bool = True) -> None:
        self._provider = provider
        self._processor = processor
        self._sampler = None if default_sampler else provider.sampler

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> Tracing | None:
        """A tracer exporting over OTLP/HTTP when the variables ask for one
        and the SDK is installed; None otherwise (said once when asked for
        and missing)."""
        env = os.environ if env is None else env
        if not wanted(env):
            return None
        try:
            from opentelemetry.sdk.resources import Resource
            from opentelemetry.sdk.trace import TracerProvider
            from opentelemetry.sdk.trace.export import BatchSpanProcessor
        except ImportError:
            log.event("tracing_unavailable", logging.WARNING,
                      reason="OTEL_EXPORTER_OTLP_ENDPOINT is set but the otel extra is not "
                             "installed: pip install 'dispatcher[otel]'")  # fmt: skip
            return None
        # OpenTelemetry's precedence: OTEL_SERVICE_NAME, then a service.name
        # in OTEL_RESOURCE_ATTRIBUTES; ours only when neither names one.
        service = (
            env.get("OTEL_SERVICE_NAME")
            or _resource_attribute(env.get("OTEL_RESOURCE_ATTRIBUTES"), "service.name")
            or "dispatcher"
        )
        provider = TracerProvider(resource=Resource.create({"service.name": service}))
        # Larger batches than the SDK's 512 unless OTEL_BSP_* says otherwise:
        # at thousands of attempts a second, one export request (one HTTP
        # round trip from the SDK's thread, holding the GIL to write it) per
        # 2,048 spans rather than per 512.
        processor = BatchSpanProcessor(
            exporter(provider.resource),
            max_queue_size=None if env.get("OTEL_BSP_MAX_QUEUE_SIZE") else BSP_QUEUE,
            max_export_batch_size=None if env.get("OTEL_BSP_MAX_EXPORT_BATCH_SIZE") else BSP_BATCH,
        )
        provider.add_span_processor(processor)  # shut down with the provider
        sampler = (env.get("OTEL_TRACES_SAMPLER") or "").strip().lower()
        return cls(provider, processor, default_sampler=sampler in ("", "parentbased_always_on"))

    def start(
        self, d: Delivery, wire: EndpointWire, breaker: str | None = None
    ) -> tuple[SpanRecord | None, str]:
        """The attempt's span (None when not sampled), opened now, and the
        traceparent that makes the receiver's work its child. `breaker`: the
        endpoint's breaker state the attempt went under (`closed`, or
        `half_open` for a trial)."""
        start_ns = time.time_ns()
        parent = attemptdetail.parent_ids(d.traceparent)
        trace_id = parent[0] if parent is not None else _random_id(128)
        span_id = _random_id(64)
        target = wire.target
        attributes: dict[str, Any] = {
            "http.request.method": wire.method,
            "url.scheme": target.scheme,
            "server.address": target.host or "",
            "server.port": target.port or 0,
            "url.full": wire.url_shown,
            "dispatcher.endpoint.id": d.endpoint_id,
            "dispatcher.application": wire.app,
            "dispatcher.event.type": d.event_type,
            "dispatcher.event.id": d.event_id,
            "dispatcher.delivery.id": d.id,
            "dispatcher.attempt": d.attempt_count + 1,
        }
        if breaker is not None:
            attributes["dispatcher.breaker.state"] = breaker
        name = f"{wire.method} webhook"
        trace_state = _trace_state(d.tracestate) if parent is not None else ""
        if self._sampler is None:  # parent-based always-on
            sampled = parent is None or parent[2]
        else:
            sampled, trace_state = self._sample(parent, d.tracestate, trace_id, name, attributes)
        traceparent = f"00-{trace_id:032x}-{span_id:016x}-{'01' if sampled else '00'}"
        if not sampled:
            return None, traceparent
        span = SpanRecord(
            trace_id, span_id, parent[1] if parent is not None else None, trace_state, name,
            start_ns, 0, attributes,
            flags=FLAGS_HAS_IS_REMOTE | (FLAGS_IS_REMOTE if parent is not None else 0),
        )  # fmt: skip
        return span, traceparent

    def _sample(
        self,
        parent: tuple[int, int, bool] | None,
        tracestate: str | None,
        trace_id: int,
        name: str,
        attributes: dict[str, Any],
    ) -> tuple[bool, str]:
        """A configured sampler's decision, asked as the SDK asks it."""
        from opentelemetry import trace
        from opentelemetry.sdk.trace.sampling import Decision

        context = None
        if parent is not None:
            state = trace.TraceState.from_header([tracestate]) if tracestate else None
            span_context = trace.SpanContext(
                parent[0], parent[1], is_remote=True,
                trace_flags=trace.TraceFlags(1 if parent[2] else 0), trace_state=state,
            )  # fmt: skip
            context = trace.set_span_in_context(trace.NonRecordingSpan(span_context))
        assert self._sampler is not None
        result = self._sampler.should_sample(
            context, trace_id, name, trace.SpanKind.CLIENT, attributes
        )
        if result.attributes:
            attributes.update(result.attributes)
        state = result.trace_state
        text = ",".join(f"{k}={v}" for k, v in state.items()) if state is not None else ""
        return result.decision is Decision.RECORD_AND_SAMPLE, text

    def end(self, span: SpanRecord | None, result: AttemptResult | None) -> None:
        """Ends the span with what the attempt saw (None: it was cut short)."""
        if span is None:
            return
        span.end_ns = time.time_ns()
        attributes = span.attributes
        if result is None:
            attributes["error.type"] = "cancelled"
            span.status = STATUS_ERROR
        else:
            if result.status_code is not None:
                attributes["http.response.status_code"] = result.status_code
            if result.remote_addr is not None:
                attributes["network.peer.address"] = result.remote_addr
            attributes["dispatcher.verdict"] = result.verdict.value
            if result.timing is not None:
                span.events = _phases(span.start_ns, result.timing)
            if result.verdict is not Verdict.SUCCESS:
                error = result.error or (
                    str(result.status_code) if result.status_code is not None else "failed"
                )
                attributes["error.type"] = error
                span.status = STATUS_ERROR
        self._processor.on_end(span)

    async def close(self) -> None:
        """Exports what is still batched (the SDK's own bounded wait)."""
        await asyncio.to_thread(self._provider.shutdown)


def exporter(resource: Any) -> Any:
    """The SDK's OTLP/HTTP span exporter (its endpoint, headers, timeout,
    compression and TLS from `OTEL_EXPORTER_OTLP_*`, its retries), writing
    the request with core.otlp."""
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.trace.export import SpanExportResult

    scope = ("dispatcher", __version__)
    attrs = dict(resource.attributes)
    schema_url = resource.schema_url or ""

    class Exporter(OTLPSpanExporter):  # type: ignore[misc]
        def export(self, spans: Any) -> SpanExportResult:
            if self._shutdown:
                return SpanExportResult.FAILURE
            data = export_request(attrs, scope, spans, resource_schema_url=schema_url)
            # `_client`: the exporter's HTTP client (opentelemetry-exporter-
            # otlp-proto-http, pinned): posts, retries, says what failed.
            sent = self._client.export(data)
            return SpanExportResult.SUCCESS if sent.success else SpanExportResult.FAILURE

    return Exporter()


def _resource_attribute(text: str | None, key: str) -> str | None:
    """`key`'s value in OTEL_RESOURCE_ATTRIBUTES (`k=v,k2=v2`, values
    percent-encoded), or None."""
    for item in (text or "").split(","):
        name, sep, value = item.partition("=")
        if sep and name.strip() == key and value.strip():
            return unquote(value.strip())
    return None


def _trace_state(tracestate: str | None) -> str:
    """The producer's tracestate as the SDK writes a span's: its members
    joined by commas, blanks dropped."""
    if not tracestate:
        return ""
    return ",".join(m.strip() for m in tracestate.split(",") if m.strip())


def _random_id(bits: int) -> int:
    """A trace or span id as the SDK's RandomIdGenerator makes them: never 0."""
    while True:
        value = random.getrandbits(bits)
        if value:
            return value


PHASES = ("dns", "connect", "tls")
MS = "dispatcher.phase.ms"


def _phases(start_ns: int, timing: Timing) -> list[tuple[str, int, dict[str, Any]]]:
    """An event at the end of each phase the attempt went through (as
    Convoy's client span has): `dns`, `connect`, `tls` when it opened a
    connection, then `ttfb` when the status line came; each with the
    phase's own length in ms (`dispatcher.phase.ms`). The phases run one
    after the other from the span's start, so their ends are running sums."""
    *opening, ttfb = timing
    at = 0.0
    out = []
    for name, took in zip(PHASES, opening, strict=True):
        if took is not None:
            at += took
            out.append((name, start_ns + int(at * 1e9), {MS: round(took * 1000, 3)}))
    out.append(("ttfb", start_ns + int(max(ttfb, at) * 1e9), {MS: round(ttfb * 1000, 3)}))
    return out
