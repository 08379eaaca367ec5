"""Each attempt as an OpenTelemetry client span (SPEC "Traces and attempt
details"), when asked for: `OTEL_EXPORTER_OTLP_ENDPOINT` (or
`OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`) set and the `otel` extra installed
(`pip install 'dispatcher[otel]'`). Off otherwise, and then this module
costs nothing: the sender sends the producer's trace on with a span id of
its own (core.attemptdetail.child_traceparent) and exports nothing.

Why a second process: a span made, batched and encoded on the worker cost
55 µs of its CPU an attempt (the SDK's batch thread holds the GIL while it
encodes), a quarter of a fast delivery's (BENCHMARKS, issue 34). Here the
event loop keeps only what the attempt saw, as a tuple of plain values,
and hands them every FRAME_S (or FRAME_SPANS) through a pipe to its own
exporter process (worker/spanexport.py), which makes the spans and
exports them with the SDK (its batch processor, its OTLP/HTTP exporter,
`OTEL_EXPORTER_OTLP_*` and `OTEL_BSP_*`). The exporter exits when the pipe
closes, after exporting what it holds; a worker killed outright closes it
too. Spans are best effort, as the SDK's: when the exporter falls behind
by more than MAX_PENDING bytes, or has gone, spans are dropped and counted
(`tracing_dropped` when the worker stops), never waited for.

The sampler is the SDK's (`OTEL_TRACES_SAMPLER`, default parent-based
always-on: an attempt follows its producer's sampling decision, and one
without a producer's trace is sampled); a configured one is asked here, as
the SDK asks it, since the traceparent the receiver gets carries its
decision.

What a span carries: OpenTelemetry's HTTP client attributes (method, the
endpoint's scheme, host, port and path: never its query, which a postback
fills with macro values, nor credentials), the status code, `error.type`
(our error class), the peer address, and ours: the endpoint, application,
event type, event and delivery ids, attempt number, breaker state and
verdict. Never a payload, a header value, a secret or a macro value.
"""

from __future__ import annotations

import asyncio
import importlib.util
import logging
import marshal
import os
import subprocess
import sys
from collections.abc import Mapping
from time import time_ns
from typing import Any

from dispatcher import log
from dispatcher.core.models import AttemptResult, Delivery
from dispatcher.worker.spanexport import FRAME_HEAD, opening
from dispatcher.worker.wire import EndpointWire

# What the loop gathers before handing it over: at most FRAME_SPANS spans,
# sent at most FRAME_S after the first of them ended.
FRAME_SPANS = 1024
FRAME_S = 0.2
# Bytes written to the exporter and not yet read by it; past this, spans
# are dropped (the SDK's batch processor drops past its queue, 2,048).
MAX_PENDING = 8 * 1024 * 1024
# How long a stopping worker waits for its exporter's last export.
CLOSE_S = 10.0


def wanted(env: Mapping[str, str]) -> bool:
    if (env.get("OTEL_SDK_DISABLED") or "").strip().lower() == "true":
        return False
    return bool(
        env.get("OTEL_EXPORTER_OTLP_ENDPOINT") or env.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
    )


class _Pipe(asyncio.Protocol):
    def __init__(self, tracing: Tracing) -> None:
        self._tracing = tracing

    def connection_lost(self, exc: Exception | None) -> None:
        self._tracing._gone()


class Tracing:
    """Spans for attempts: opened by start (the traceparent the receiver
    gets), ended by end (the attempt's outcome, queued for the exporter)."""

    def __init__(self, proc: subprocess.Popen[bytes], sampler: Any = None) -> None:
        self._proc = proc
        self._sampler = sampler  # None: parent-based always-on, decided here
        self._spans: list[tuple[Any, ...]] = []
        self._statics: dict[EndpointWire, tuple[Any, ...]] = {}
        self._transport: asyncio.WriteTransport | None = None
        self._timer: asyncio.TimerHandle | None = None
        self._closed = False
        self.dropped = 0

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> Tracing | None:
        """Tracing with its exporter process started, when the variables ask
        for it and the SDK is installed; None otherwise (said once when asked
        for and missing)."""
        env = os.environ if env is None else env
        if not wanted(env):
            return None
        if importlib.util.find_spec("opentelemetry.sdk") is None:
            log.event("tracing_unavailable", logging.WARNING,
                      reason="OTEL_EXPORTER_OTLP_ENDPOINT is set but the otel extra is not "
                             "installed: pip install 'dispatcher[otel]'")  # fmt: skip
            return None
        sampler = None
        name = (env.get("OTEL_TRACES_SAMPLER") or "").strip().lower()
        if name not in ("", "parentbased_always_on"):
            from opentelemetry.sdk.trace import TracerProvider

            sampler = TracerProvider().sampler  # read from OTEL_TRACES_SAMPLER(_ARG)
        proc = subprocess.Popen(
            [sys.executable, "-m", "dispatcher.worker.spanexport"],
            stdin=subprocess.PIPE, env=dict(env),
        )  # fmt: skip
        return cls(proc, sampler)

    def start(
        self, d: Delivery, wire: EndpointWire, breaker: str | None = None
    ) -> tuple[tuple[Any, ...] | None, str]:
        """The attempt's open span (None when not sampled) and the
        traceparent that makes the receiver's work its child. `breaker`: the
        endpoint's breaker state the attempt went under (`closed`, or
        `half_open` for a trial)."""
        start_ns = time_ns()
        # Stored only when valid (dispatcher_enqueue checks it), so read by place.
        parent = d.traceparent
        span_id = _random_hex(8)
        if parent is not None:
            trace_id, parent_span, sampled = parent[3:35], parent[36:52], int(parent[53:], 16) & 1
            trace_state = _trace_state(d.tracestate)
        else:
            trace_id, parent_span, sampled, trace_state = _random_hex(16), None, 1, ""
        extra = None
        if self._sampler is not None:
            sampled, trace_state, extra = self._sample(d, wire, parent, trace_id, breaker)
        traceparent = f"00-{trace_id}-{span_id}-{'01' if sampled else '00'}"
        if not sampled or self._closed:
            return None, traceparent
        return (trace_id, span_id, parent_span, trace_state, start_ns, d, wire, breaker,
                extra), traceparent  # fmt: skip

    def end(self, span: tuple[Any, ...] | None, result: AttemptResult | None) -> None:
        """Ends the span with what the attempt saw (None: it was cut short)."""
        if span is None or self._closed:
            return
        trace_id, span_id, parent_span, trace_state, start_ns, d, wire, breaker, extra = span
        static = self._statics.get(wire)
        if static is None:
            static = _static(wire)
            if len(self._statics) >= 4096:
                self._statics.clear()
            self._statics[wire] = static
        if result is None:
            outcome: tuple[Any, ...] | None = None
        else:
            outcome = (result.status_code, result.remote_addr, result.verdict.value,
                       result.error, result.timing)  # fmt: skip
        self._spans.append((
            trace_id, span_id, parent_span, trace_state, start_ns, time_ns(), static,
            d.endpoint_id, d.event_type, d.event_id, d.id, d.attempt_count + 1, breaker, extra,
            outcome,
        ))  # fmt: skip
        if len(self._spans) >= FRAME_SPANS:
            self._send()
        elif self._timer is None:
            self._timer = asyncio.get_running_loop().call_later(FRAME_S, self._send)

    def _send(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        spans, self._spans = self._spans, []
        if not spans or self._closed:
            return
        transport = self._transport
        if transport is None or transport.get_write_buffer_size() > MAX_PENDING:
            self.dropped += len(spans)
            return
        frame = marshal.dumps(spans)
        transport.write(FRAME_HEAD.pack(len(frame)) + frame)

    async def open(self) -> None:
        """The pipe to the exporter, made non-blocking and watched by the
        loop: a write never waits for the exporter (the transport buffers
        what it cannot take yet)."""
        if self._transport is None and self._proc.stdin is not None:
            loop = asyncio.get_running_loop()
            self._transport, _ = await loop.connect_write_pipe(
                lambda: _Pipe(self), self._proc.stdin
            )

    def _gone(self) -> None:
        if not self._closed:
            self._closed = True
            log.event("tracing_exporter_gone", logging.WARNING,
                      reason="the span exporter process exited; spans are no longer exported",
                      returncode=self._proc.poll())  # fmt: skip

    def _sample(
        self,
        d: Delivery,
        wire: EndpointWire,
        parent: str | None,
        trace_id: str,
        breaker: str | None,
    ) -> tuple[int, str, dict[str, Any] | None]:
        """A configured sampler's decision, asked as the SDK asks it: its
        sampled flag, the span's tracestate and the attributes it adds."""
        from opentelemetry import trace
        from opentelemetry.sdk.trace.sampling import Decision

        context = None
        if parent is not None:
            state = trace.TraceState.from_header([d.tracestate]) if d.tracestate else None
            span_context = trace.SpanContext(
                int(trace_id, 16), int(parent[36:52], 16), is_remote=True,
                trace_flags=trace.TraceFlags(int(parent[53:], 16) & 1), trace_state=state,
            )  # fmt: skip
            context = trace.set_span_in_context(trace.NonRecordingSpan(span_context))
        attributes = opening(_static(wire), d.endpoint_id, d.event_type, d.event_id, d.id,
                             d.attempt_count + 1, breaker)  # fmt: skip
        result = self._sampler.should_sample(
            context,
            int(trace_id, 16),
            f"{wire.method} webhook",
            trace.SpanKind.CLIENT,
            attributes,
        )
        state = result.trace_state
        text = ",".join(f"{k}={v}" for k, v in state.items()) if state is not None else ""
        sampled = result.decision is Decision.RECORD_AND_SAMPLE
        return int(sampled), text, dict(result.attributes) if result.attributes else None

    async def close(self) -> None:
        """Hands over what is still gathered, closes the pipe and waits (at
        most CLOSE_S) for the exporter's last export."""
        if not self._closed:
            self._send()
        self._closed = True
        if self._transport is not None:
            self._transport.close()  # after writing what it buffered
        elif self._proc.stdin is not None:
            self._proc.stdin.close()
        try:
            await asyncio.to_thread(self._proc.wait, CLOSE_S)
        except subprocess.TimeoutExpired:
            self._proc.kill()
            await asyncio.to_thread(self._proc.wait)
        if self.dropped:
            log.event("tracing_dropped", logging.WARNING, spans=self.dropped,
                      reason="the span exporter fell behind")  # fmt: skip


def _static(wire: EndpointWire) -> tuple[Any, ...]:
    """A span's attributes that one endpoint's wire settles."""
    target = wire.target
    return (wire.method, target.scheme, target.host or "", target.port or 0, wire.url_shown,
            wire.app)  # fmt: skip


def _trace_state(tracestate: str | None) -> str:
    """The producer's tracestate as the SDK writes a span's: its members
    joined by commas, blanks dropped."""
    if not tracestate:
        return ""
    return ",".join(m.strip() for m in tracestate.split(",") if m.strip())


def _random_hex(n: int) -> str:
    """A trace or span id of n random bytes, never 0 (as the SDK's)."""
    while True:
        value = os.urandom(n).hex()
        if value != _ZERO[n]:
            return value


_ZERO = {8: "0" * 16, 16: "0" * 32}
