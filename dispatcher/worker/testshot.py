"""A test shot: one request to an endpoint now, outside the queue.

What an affiliate manager does before going live (Everflow's postback test):
the endpoint's own wire (signing, macros, value map, body, success body,
SSRF guard, timeout, mTLS, proxy), built and sent by the worker's sender, so
the shot is exactly what a delivery would be. It writes nothing: no queue
row, no latency sample, no breaker; the answer's first 2 KiB are returned
to be shown once, never stored.
"""

from __future__ import annotations

import time
import uuid
from typing import Any

from dispatcher.core.errors import BadInput, UnknownEndpoint
from dispatcher.core.models import Delivery, Verdict
from dispatcher.db import Conn, store
from dispatcher.settings import Settings
from dispatcher.worker.sender import Sender

SHOWN_BYTES = 2048
TEST_EVENT_TYPE = "dispatcher.test"  # as ops.service's test event


async def send_now(
    conn: Conn,
    settings: Settings,
    endpoint_id: int,
    body: bytes,
    *,
    event_type: str = TEST_EVENT_TYPE,
    app: str | None = None,
) -> dict[str, Any]:
    """Sends `body` (JSON text, checked by the caller) to the endpoint once;
    `app`: the caller's application (another's endpoint is unknown). A
    disabled endpoint is sent to as well: testing is how one knows it may
    be enabled again."""
    _, states = await store.engine_endpoints(conn, settings.secret_box(), endpoint_id)
    if not states or (app is not None and states[0].endpoint.app != app):
        raise UnknownEndpoint(f"no endpoint with id {endpoint_id}")
    state = states[0]
    if state.broken is not None:
        raise BadInput(f"endpoint {endpoint_id} is unusable: {state.broken}")
    event_id = f"evt_test_{uuid.uuid4().hex}"
    out: dict[str, Any] = {"endpoint_id": endpoint_id, "event_id": event_id}
    sender = Sender(
        allow_private=settings.allow_private_targets,
        allowed_networks=settings.allowed_networks,
        body_cap=max(settings.response_body_cap, SHOWN_BYTES),
        proxy=settings.http_proxy,
        ca_file=settings.ca_file,
    )
    await sender.start()
    try:
        wire = sender.wire(state.endpoint)
        doc, unshapeable = wire.prepare(body)
        if unshapeable is not None:
            # What the queue would dead-letter: said, and nothing sent.
            return {**out, "sent": False, "delivered": False, "error": unshapeable}
        d = Delivery(id=0, endpoint_id=endpoint_id, event_id=event_id, body=body,
                     attempt_count=0, max_attempts=1, event_type=event_type)  # fmt: skip
        shown: list[Any] = []
        t0 = time.perf_counter()
        result = await sender.post(wire, d, doc, shown)
        latency_ms = int((time.perf_counter() - t0) * 1000)
    finally:
        await sender.close()
    answer = shown[2] if len(shown) > 2 else b""
    return {
        **out,
        "sent": bool(shown),
        "delivered": result.verdict is Verdict.SUCCESS,
        "method": shown[0] if shown else wire.method,
        "url": shown[1] if shown else None,
        "status_code": result.status_code,
        "latency_ms": result.response_ms if result.status_code is not None else latency_ms,
        "error": result.error,
        "body": answer[:SHOWN_BYTES].decode("utf-8", "replace"),
        "body_truncated": len(answer) > SHOWN_BYTES,
    }
