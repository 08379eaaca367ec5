"""The producer API: enqueue inside the caller's own transaction."""

from __future__ import annotations

from typing import Any

import asyncpg

from dispatcher.ops import service
from dispatcher.ops.inputs import DEFAULT_MAX_PAYLOAD_BYTES


async def enqueue(
    conn: asyncpg.Connection,
    event_type: str,
    payload: Any,
    event_id: str | None = None,
    *,
    endpoint_id: int | None = None,
    app: str | None = None,
    max_payload_bytes: int = DEFAULT_MAX_PAYLOAD_BYTES,
    traceparent: str | None = None,
    tracestate: str | None = None,
) -> list[int]:
    """Queue one event on the caller's connection; commits with the caller.

    `app`: the application whose endpoints get it (None: `default`, or with
    `endpoint_id`, that endpoint's); an unknown one raises BadInput.

    `payload` may be JSON text or bytes (sent exactly as given) or any value
    orjson encodes. Returns the delivery ids (the existing ones when the event
    id was already queued).

    A type in the event-type catalogue checks the payload against its
    schema: a mismatch, or an archived type, raises Unprocessable (naming
    the failing path) and queues nothing.

    `traceparent` (and `tracestate`): the W3C trace context of the caller's
    span (OpenTelemetry's `propagate.inject` writes them); each attempt's
    request carries a traceparent of that trace with a span of its own. An
    invalid one is ignored.
    """
    result = await service.enqueue(
        conn,
        event_type,
        payload,
        event_id,
        endpoint_id,
        max_payload_bytes=max_payload_bytes,
        app=app,
        traceparent=traceparent,
        tracestate=tracestate,
    )
    ids: list[int] = result["deliveries"]
    return ids
