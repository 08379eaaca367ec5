"""The span exporter process of a worker with tracing on (worker/tracing.py
says why it is a process of its own). It reads the attempts its worker
hands over on stdin (frames: a 4-byte little-endian length, then a
marshalled list of tuples in tracing.end's layout), makes each a span,
encoded by core.otlp, and hands them to the SDK's batch processor and
OTLP/HTTP exporter, configured by the standard variables
(`OTEL_EXPORTER_OTLP_*`, `OTEL_BSP_*`, `OTEL_SERVICE_NAME`,
`OTEL_RESOURCE_ATTRIBUTES`). When stdin closes (its worker stopped, or was
killed), it exports what it holds (the SDK's bounded wait) and exits.

Run by the worker as `python -m dispatcher.worker.spanexport`; not a
command for people.
"""

from __future__ import annotations

import marshal
import os
import signal
import struct
import sys
from collections.abc import Mapping
from typing import Any, BinaryIO
from urllib.parse import unquote

from dispatcher.core.otlp import (
    FLAGS_HAS_IS_REMOTE,
    FLAGS_IS_REMOTE,
    STATUS_ERROR,
    SpanRecord,
    export_request,
)
from dispatcher.version import __version__

# A frame's head: its length.
FRAME_HEAD = struct.Struct("<I")

# The batch processor's queue and export batch, unless OTEL_BSP_* set them.
BSP_QUEUE = 16384
BSP_BATCH = 2048


def provider(env: Mapping[str, str]) -> tuple[Any, Any]:
    """The SDK's tracer provider with our resource, and its batch processor
    exporting over OTLP/HTTP."""
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    # OpenTelemetry's precedence: OTEL_SERVICE_NAME, then a service.name
    # in OTEL_RESOURCE_ATTRIBUTES; ours only when neither names one.
    service = (
        env.get("OTEL_SERVICE_NAME")
        or _resource_attribute(env.get("OTEL_RESOURCE_ATTRIBUTES"), "service.name")
        or "dispatcher"
    )
    made = TracerProvider(resource=Resource.create({"service.name": service}))
    # Larger batches than the SDK's 512 unless OTEL_BSP_* says otherwise:
    # at thousands of attempts a second, one export request per 2,048
    # spans rather than per 512.
    processor = BatchSpanProcessor(
        exporter(made.resource),
        max_queue_size=None if env.get("OTEL_BSP_MAX_QUEUE_SIZE") else BSP_QUEUE,
        max_export_batch_size=None if env.get("OTEL_BSP_MAX_EXPORT_BATCH_SIZE") else BSP_BATCH,
    )
    made.add_span_processor(processor)  # shut down with the provider
    return made, processor


def exporter(resource: Any) -> Any:
    """The SDK's OTLP/HTTP span exporter (its endpoint, headers, timeout,
    compression and TLS from `OTEL_EXPORTER_OTLP_*`, its retries), writing
    the request with core.otlp: the SDK's generic encoder costs 80 µs a
    span, ours a tenth of that."""
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


PHASES = ("dns", "connect", "tls")
MS = "dispatcher.phase.ms"


def opening(
    static: tuple[Any, ...],
    endpoint_id: int,
    event_type: str,
    event_id: str,
    delivery_id: int,
    attempt: int,
    breaker: str | None,
) -> dict[str, Any]:
    """A span's attributes as its attempt starts (what a configured sampler
    is shown, too): `static` is tracing._static's (method, scheme, host,
    port, URL shown, application)."""
    method, scheme, host, port, url, app = static
    attributes: dict[str, Any] = {
        "http.request.method": method,
        "url.scheme": scheme,
        "server.address": host,
        "server.port": port,
        "url.full": url,
        "dispatcher.endpoint.id": endpoint_id,
        "dispatcher.application": app,
        "dispatcher.event.type": event_type,
        "dispatcher.event.id": event_id,
        "dispatcher.delivery.id": delivery_id,
        "dispatcher.attempt": attempt,
    }
    if breaker is not None:
        attributes["dispatcher.breaker.state"] = breaker
    return attributes


def span(item: tuple[Any, ...]) -> SpanRecord:
    """One attempt, as tracing.end handed it over, as a span."""
    (trace_id, span_id, parent_span, trace_state, start_ns, end_ns, static, endpoint_id,
     event_type, event_id, delivery_id, attempt, breaker, extra, outcome) = item  # fmt: skip
    attributes = opening(static, endpoint_id, event_type, event_id, delivery_id, attempt,
                         breaker)  # fmt: skip
    if extra:
        attributes.update(extra)
    record = SpanRecord(
        int(trace_id, 16), int(span_id, 16),
        int(parent_span, 16) if parent_span is not None else None, trace_state,
        f"{static[0]} webhook", start_ns, end_ns, attributes,
        flags=FLAGS_HAS_IS_REMOTE | (FLAGS_IS_REMOTE if parent_span is not None else 0),
    )  # fmt: skip
    if outcome is None:  # cut short
        attributes["error.type"] = "cancelled"
        record.status = STATUS_ERROR
        return record
    status_code, remote_addr, verdict, error, timing = outcome
    if status_code is not None:
        attributes["http.response.status_code"] = status_code
    if remote_addr is not None:
        attributes["network.peer.address"] = remote_addr
    attributes["dispatcher.verdict"] = verdict
    if timing is not None:
        record.events = _phases(start_ns, timing)
    if verdict != "success":
        attributes["error.type"] = error or (
            str(status_code) if status_code is not None else "failed"
        )
        record.status = STATUS_ERROR
    return record


def _phases(start_ns: int, timing: Any) -> list[tuple[str, int, dict[str, Any]]]:
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


def _resource_attribute(text: str | None, key: str) -> str | None:
    """`key`'s value in OTEL_RESOURCE_ATTRIBUTES (`k=v,k2=v2`, values
    percent-encoded), or None."""
    for item in (text or "").split(","):
        name, sep, value = item.partition("=")
        if sep and name.strip() == key and value.strip():
            return unquote(value.strip())
    return None


def frames(stream: BinaryIO) -> Any:
    """Each frame's list of attempts, until the stream ends."""
    while True:
        head = stream.read(FRAME_HEAD.size)
        if len(head) < FRAME_HEAD.size:
            return
        (size,) = FRAME_HEAD.unpack(head)
        body = stream.read(size)
        if len(body) < size:
            return
        yield marshal.loads(body)


def main(env: Mapping[str, str], stream: BinaryIO) -> None:
    # Its worker decides when it ends (by closing the pipe): a Ctrl-C or a
    # TERM to the process group must not cut the last export short.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    made, processor = provider(env)
    try:
        for items in frames(stream):
            for item in items:
                processor.on_end(span(item))
    finally:
        made.shutdown()


if __name__ == "__main__":
    main(os.environ, sys.stdin.buffer)
