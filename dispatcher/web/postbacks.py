"""Postback tooling over HTTP (SPEC "Postback tooling"): a test shot sent
now (`POST /v1/endpoints/{id}/send-test`, beside `…/test`, which queues a
test event), and releasing or cancelling one event's held deliveries.

Rows of the server's one table (`ROUTES`, joined into admin.ROUTES); each
handler parses, calls one operation and renders it.
"""

from __future__ import annotations

import contextlib

import orjson
from aiohttp import web

from dispatcher import db
from dispatcher.core.models import TEST_EVENT_TYPE
from dispatcher.ops import service
from dispatcher.ops.inputs import check_event_type, check_id, payload_text
from dispatcher.web import openapi as oas
from dispatcher.web.keys import POOL, SETTINGS, acquire, read_object
from dispatcher.web.params import scope
from dispatcher.web.routes import Access, Handler, Route
from dispatcher.web.security import json_response as _json
from dispatcher.worker import testshot


async def endpoint_send_test(request: web.Request) -> web.Response:
    """Sends one request now and answers what the receiver said: status,
    latency, the first 2 KiB of its body. 200 whatever the receiver
    answered (the answer is the result); it counts against the
    application's events quota like a test event. One at a time per
    application (another while one is out: 429 with Retry-After), at most
    testshot.MAX_TIMEOUT_MS, and no pooled connection is held while it is
    out: the pool is what every tenant's API and /readyz wait on."""
    eid = int(request.match_info["id"])  # the route's pattern: digits
    check_id(eid, "id")
    body = await read_object(request, ("payload", "event_type", "app"))
    app = scope(request, body.get("app"))
    settings = request.app[SETTINGS]
    if "payload" in body:
        raw = payload_text(orjson.dumps(body["payload"]), settings.max_payload_bytes)
    else:
        raw = service.test_payload(eid)
    event_type = check_event_type(body.get("event_type", TEST_EVENT_TYPE))
    pool = request.app[POOL]
    async with db.acquire(pool) as conn, conn.transaction():
        # The lease first (another's endpoint: 404, a shot out: 429, neither
        # spending a token); refused by the quota, the lease rolls back.
        shot = await testshot.begin(conn, settings, eid, app=app)
        await service.take_event_quota(conn, app, 1, eid)
    try:
        doc = await testshot.fire(settings, shot, raw.encode(), event_type=event_type)
    finally:
        # Left behind (the database gone), the lease ends by itself.
        with contextlib.suppress(*db.DATABASE_ERRORS):
            async with db.acquire(pool) as conn:
                await testshot.end(conn, shot)
    return _json(doc)


def _event_action(release: bool) -> Handler:
    """`{"app"?}` or `?app=`: the event's application (default: default)."""
    op = service.release_event if release else service.cancel_event

    async def handler(request: web.Request) -> web.Response:
        body = await read_object(request, ("app",))
        app = scope(request, body.get("app"))
        async with acquire(request) as conn:
            return _json(await op(conn, request.match_info["event_id"], app))

    return handler


ID = "{id:[0-9]+}"
# fmt: off
ROUTES: tuple[Route, ...] = (
    Route("POST", f"/v1/endpoints/{ID}/send-test",    Access.APP,
          endpoint_send_test,   oas.ENDPOINT_SEND_TEST),
    Route("POST", "/v1/events/{event_id}/release",    Access.APP,
          _event_action(True),  oas.EVENT_RELEASE),
    Route("POST", "/v1/events/{event_id}/cancel",     Access.APP,
          _event_action(False), oas.EVENT_CANCEL),
)
# fmt: on
