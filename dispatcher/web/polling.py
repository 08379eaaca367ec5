"""GET /v1/poll/{endpoint_id}: a polling endpoint's deliveries for its
consumer (SPEC "Destinations"); ops.polling reads and acknowledges.

A long poll (`wait_s`) holds no database connection while it waits: it
reads again every POLL_EVERY_S on a pooled connection, until something is
there or the wait is over (at most ops.polling.MAX_WAIT_S).
"""

from __future__ import annotations

import asyncio
import time

from aiohttp import web

from dispatcher.ops import polling
from dispatcher.web import openapi as oas
from dispatcher.web.browse import positive_int
from dispatcher.web.keys import acquire
from dispatcher.web.params import scope
from dispatcher.web.routes import Access, Route
from dispatcher.web.security import json_response as _json

POLL_EVERY_S = 0.25


async def poll(request: web.Request) -> web.Response:
    endpoint_id = positive_int(request.match_info["endpoint_id"], "endpoint_id")
    given = request.query.get("cursor") or None
    cursor = polling.parse_cursor(given)
    limit = polling.check_limit(request.query.get("limit"))
    wait_s = polling.check_wait(request.query.get("wait_s"))
    app = scope(request)
    until = time.monotonic() + wait_s
    async with acquire(request) as conn:
        await polling.check_polled(conn, endpoint_id, app)
        doc = await polling.read(conn, endpoint_id, cursor, given, limit)
    while not doc["data"] and time.monotonic() < until:
        await asyncio.sleep(min(POLL_EVERY_S, max(0.0, until - time.monotonic())))
        async with acquire(request) as conn:
            doc = await polling.read(conn, endpoint_id, cursor, given, limit)
    return _json(doc)


# fmt: off
ROUTES: tuple[Route, ...] = (
    Route("GET",    "/v1/poll/{endpoint_id:[0-9]+}",        Access.APP,
          poll,                    oas.POLL),
)
# fmt: on
