"""The operations on events: one function each, and the events quota.

Queue one event (given, or as a JSON document) or a JSONL file of them,
release or cancel an event's deliveries, send a test event. Every enqueue
checks its input here (ids, type, payload size, the schedule: deliver_at,
delay_s, hold) and the payload against the event type's schema
(ops.eventtypes); `within_quota` callers (the HTTP API) take from the
application's max_events_per_s first (`take_event_quota`, which endpoint
changes and replays charge too). Callers reach these through ops.service;
this module never runs SQL (the catalog does).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from datetime import datetime
from typing import Any

import orjson

from dispatcher.core.attemptdetail import trace_context
from dispatcher.core.errors import BadInput, NotFound, Throttled
from dispatcher.core.models import TEST_EVENT_TYPE
from dispatcher.db import Conn, applications, catalog
from dispatcher.ops.eventtypes import validate_events, validate_payload
from dispatcher.ops.inputs import (
    DEFAULT_MAX_PAYLOAD_BYTES,
    check_deliver_at,
    check_event_id,
    check_event_type,
    check_id,
    check_number,
    event_id_of,
    parse_event,
    payload_text,
    read_events,
)
from dispatcher.ops.tenancy import check_app


async def enqueue(
    conn: Conn,
    event_type: str,
    payload: Any,
    event_id: str | None = None,
    endpoint_id: int | None = None,
    *,
    max_payload_bytes: int = DEFAULT_MAX_PAYLOAD_BYTES,
    app: str | None = None,
    deliver_at: str | datetime | None = None,
    delay_s: float | None = None,
    hold: bool = False,
    traceparent: str | None = None,
    tracestate: str | None = None,
) -> dict[str, Any]:
    """Queues one event of `app` (None: the default application, or the
    given endpoint's): a delivery per subscribed endpoint of that application
    (or only to `endpoint_id`). JSON text or bytes are kept byte for byte.
    The same event id again in the same application creates nothing new and
    answers the existing deliveries. `hold`: sent only once released;
    `deliver_at` (a time) or `delay_s`: not before then. `traceparent`: a
    W3C trace context each attempt joins (an invalid one is ignored)."""
    event_type = check_event_type(event_type)
    event_id = event_id_of(event_id)
    endpoint_id = check_id(endpoint_id)
    text = payload_text(payload, max_payload_bytes)
    app = _app(app)
    await validate_payload(conn, app, event_type, text, endpoint_id=endpoint_id)
    when = _schedule(deliver_at, delay_s, hold)
    parent, state = trace_context(traceparent, tracestate)
    ids = await catalog.enqueue(conn, event_type, text, event_id, endpoint_id, app, **when,
                                traceparent=parent, tracestate=state)  # fmt: skip
    return {"event_id": event_id, "deliveries": ids}


MAX_DELAY_S = 366 * 86_400.0  # a year and a day: a conversion's approval window at most


def _schedule(deliver_at: Any, delay_s: Any, hold: Any) -> dict[str, Any]:
    """deliver_at / delay_s / hold, checked, as catalog.enqueue takes them."""
    if deliver_at is not None and delay_s is not None:
        raise BadInput("give deliver_at or delay_s, not both")
    if not isinstance(hold, bool):
        raise BadInput("hold must be true or false")
    delay = None if delay_s is None else check_number(delay_s, "delay_s", 0, MAX_DELAY_S)
    at = check_deliver_at(deliver_at, "deliver_at")
    return {"deliver_at": at, "delay_s": delay, "hold": hold}


async def release_event(conn: Conn, event_id: str, app: str | None = None) -> dict[str, Any]:
    """Sends an event's held deliveries (of `app`; None: of the one
    application that has the event): `{"event_id", "released": [ids]}`.
    Releasing again changes nothing; an event the application does not
    have: NotFound."""
    event_id = event_id_required(event_id)
    app = await event_app(conn, event_id, app)
    return {"event_id": event_id, "released": await catalog.release_event(conn, app, event_id)}


async def cancel_event(conn: Conn, event_id: str, app: str | None = None) -> dict[str, Any]:
    """Ends an event's deliveries not yet sent (held, pending, awaiting a
    retry): status `cancelled`, never sent. One on the wire finishes.
    `{"event_id", "cancelled": [ids]}`."""
    event_id = event_id_required(event_id)
    # Named (an application's caller, or the operator naming one): the
    # operator's ops deliveries are no tenant's and stay (issue 32).
    of = await event_app(conn, event_id, app)
    cancelled = await catalog.cancel_event(conn, of, event_id, operator_ops=app is None)
    return {"event_id": event_id, "cancelled": cancelled}


def event_id_required(value: Any) -> str:
    event_id = check_event_id(value)
    if event_id is None:
        raise BadInput("event_id is required")
    return event_id


async def event_app(conn: Conn, event_id: str, app: str | None) -> str:
    """The application whose event this is: `app` (an application's caller,
    or the operator naming one) if it has the event; for the operator
    without one, the one application that has it. NotFound otherwise (the
    message names neither the id nor another application)."""
    apps = await catalog.event_applications(conn, event_id, tenant=app is not None)
    if app is not None:
        if check_app(app) not in apps:
            raise NotFound(f"no such event in application {app}")
        return app
    if not apps:
        raise NotFound("no such event")
    if len(apps) > 1:
        raise BadInput(f"this event id is in applications {', '.join(apps)}: name one (app)")
    return apps[0]


async def enqueue_event(
    conn: Conn,
    doc: Mapping[str, Any],
    max_payload_bytes: int = DEFAULT_MAX_PAYLOAD_BYTES,
    app: str | None = None,
    within_quota: bool = False,
    trace: tuple[str | None, str | None] = (None, None),
) -> dict[str, Any]:
    """`enqueue` for one event given as a JSON document (an API body);
    `app` is the application the document's own "app" resolved to.
    `within_quota` (the HTTP API): Throttled, with nothing queued, past the
    application's max_events_per_s. `trace`: the request's traceparent and
    tracestate headers."""
    # Scheduling belongs to one event, not to a JSONL line: taken out here.
    when = _schedule(doc.get("deliver_at"), doc.get("delay_s"), doc.get("hold", False))
    doc = {k: v for k, v in doc.items() if k not in ("deliver_at", "delay_s", "hold")}
    event_id, event_type, payload, endpoint, _ = parse_event(doc, max_payload_bytes)
    app = _app(app)
    if within_quota:
        await take_event_quota(conn, app, 1, endpoint)
    await validate_payload(conn, app, event_type, payload, endpoint_id=endpoint)
    parent, state = trace_context(*trace)
    ids = await catalog.enqueue(conn, event_type, payload, event_id, endpoint, app, **when,
                                traceparent=parent, tracestate=state)  # fmt: skip
    return {"event_id": event_id, "deliveries": ids}


async def take_event_quota(
    conn: Conn, app: str | None, n: int, endpoint_id: int | None = None
) -> None:
    """Takes `n` events from the quota of the application they go to (as
    `enqueue` resolves it), or raises Throttled and takes nothing. Tokens
    taken stay taken if the enqueue then fails: a refused call costs its
    share like any other."""
    wait_s = await applications.take_event_tokens(conn, app, n, endpoint_id)
    if wait_s is not None:
        retry = max(1, math.ceil(wait_s))
        raise Throttled(
            f"over this application's events quota (max_events_per_s): retry in {retry} s", retry
        )


async def send_test_event(
    conn: Conn, endpoint_id: int, app: str | None = None, *, within_quota: bool = False
) -> dict[str, Any]:
    """One `dispatcher.test` event to this endpoint only (its subscriptions
    and filter are not asked), as a receiver's owner checks the wiring.
    `within_quota` (the HTTP API): it counts against the events quota, or
    test events would be a way around it."""
    if within_quota:
        await take_event_quota(conn, app, 1, endpoint_id)
    event_id = event_id_of(None)
    text = test_payload(endpoint_id)
    # The catalog checks the endpoint is there and, with `app`, the application's.
    ids = await catalog.enqueue(conn, TEST_EVENT_TYPE, text, event_id, endpoint_id, app)
    return {"event_id": event_id, "deliveries": ids}


def test_payload(endpoint_id: int) -> str:
    """The payload of a test event or a test shot when none is given."""
    doc = {"type": TEST_EVENT_TYPE, "endpoint_id": endpoint_id, "message": "a test event"}
    return orjson.dumps(doc).decode()


def _app(app: str | None) -> str | None:
    return None if app is None else check_app(app)


async def enqueue_file(
    conn: Conn,
    path: str,
    max_payload_bytes: int = DEFAULT_MAX_PAYLOAD_BYTES,
    app: str | None = None,
) -> dict[str, Any]:
    """Queues a JSONL file (- for stdin) of event documents, all or
    nothing; a line without "app" is `app`'s (None: as enqueue decides)."""
    events = read_events(path, max_payload_bytes)
    if app is not None:
        check_app(app)
        events = [(*e[:4], e[4] or app) for e in events]
    await validate_events(conn, events)
    created = await catalog.enqueue_bulk(conn, events)
    return {"events": len(events), "deliveries": created}
