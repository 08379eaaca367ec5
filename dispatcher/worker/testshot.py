"""A test shot: one request to an endpoint now, outside the queue.

What an affiliate manager does before going live (Everflow's postback test):
the endpoint's own wire (signing, macros, value map, body, success body,
SSRF guard, timeout, mTLS, proxy), built and sent by the worker's sender, so
the shot is exactly what a delivery would be. It writes nothing but its
lease: no queue row, no latency sample, no breaker; the answer's first 2 KiB
are returned to be shown once, never stored.

A shot is three steps so that no database connection is held while it is
out (SPEC "Limits"; a pooled one held for a slow receiver's whole answer
once stopped every tenant's API): `begin` reads the endpoint and takes the
application's lease (one shot at a time per application, across
processes), `fire` sends with no connection, `end` gives the lease back.
The shot's timeout is the endpoint's, capped at MAX_TIMEOUT_MS.
"""

from __future__ import annotations

import dataclasses
import math
import time
import uuid
from datetime import datetime
from typing import Any

from dispatcher.core.errors import BadInput, Throttled, UnknownEndpoint
from dispatcher.core.models import TEST_EVENT_TYPE, Delivery, Endpoint, Verdict
from dispatcher.db import Conn, applications, store
from dispatcher.settings import Settings
from dispatcher.worker.sender import Sender

SHOWN_BYTES = 2048
MAX_TIMEOUT_MS = 10_000
# The lease outlives the shot's timeout by this much (the sender's own
# setup, a slow close), and ends by itself if the process dies with it.
LEASE_MARGIN_S = 5.0


@dataclasses.dataclass(frozen=True, slots=True)
class Shot:
    """What `begin` read: the endpoint (timeout capped) and the lease taken."""

    endpoint: Endpoint
    lease: datetime


async def begin(
    conn: Conn, settings: Settings, endpoint_id: int, *, app: str | None = None
) -> Shot:
    """Reads the endpoint (`app`: the caller's application; another's
    endpoint is unknown) and takes its application's test-shot lease, or
    raises Throttled (429) while another shot of that application is out.
    A disabled endpoint is sent to as well: testing is how one knows it may
    be enabled again."""
    _, states = await store.engine_endpoints(conn, settings.secret_box(), endpoint_id)
    if not states or (app is not None and states[0].endpoint.app != app):
        raise UnknownEndpoint(f"no endpoint with id {endpoint_id}")
    state = states[0]
    if state.broken is not None:
        raise BadInput(f"endpoint {endpoint_id} is unusable: {state.broken}")
    endpoint = state.endpoint
    if endpoint.timeout_ms > MAX_TIMEOUT_MS:
        endpoint = dataclasses.replace(endpoint, timeout_ms=MAX_TIMEOUT_MS)
    lease, wait_s = await applications.take_test_shot(
        conn, endpoint.app, MAX_TIMEOUT_MS / 1000 + LEASE_MARGIN_S
    )
    if lease is None:
        retry = max(1, math.ceil(wait_s))
        raise Throttled(
            f"a test shot of this application is already out (one at a time): retry in {retry} s",
            retry,
        )
    return Shot(endpoint=endpoint, lease=lease)


async def end(conn: Conn, shot: Shot) -> None:
    await applications.end_test_shot(conn, shot.endpoint.app, shot.lease)


async def send_now(
    conn: Conn,
    settings: Settings,
    endpoint_id: int,
    body: bytes,
    *,
    event_type: str = TEST_EVENT_TYPE,
    app: str | None = None,
) -> dict[str, Any]:
    """`begin`, `fire` and `end` on the caller's own connection (the Python
    API; servers and the CLI let go of theirs while the shot is out)."""
    shot = await begin(conn, settings, endpoint_id, app=app)
    try:
        return await fire(settings, shot, body, event_type=event_type)
    finally:
        await end(conn, shot)


async def fire(
    settings: Settings, shot: Shot, body: bytes, *, event_type: str = TEST_EVENT_TYPE
) -> dict[str, Any]:
    """Sends `body` (JSON text, checked by the caller) to the endpoint once,
    with no database connection: the answer, whatever the receiver said."""
    endpoint_id = shot.endpoint.id
    event_id = f"evt_test_{uuid.uuid4().hex}"
    out: dict[str, Any] = {"endpoint_id": endpoint_id, "event_id": event_id}
    sender = Sender(
        allow_private=settings.allow_private_targets,
        allowed_networks=settings.allowed_networks,
        body_cap=max(settings.response_body_cap, SHOWN_BYTES),
        proxy=settings.http_proxy,
        ca_file=settings.ca_file,
        brokers_allowed=settings.brokers_allowed,
    )
    await sender.start()
    try:
        wire = sender.wire(shot.endpoint)
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
