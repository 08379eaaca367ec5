"""Svix's messages and attempts (`/api/v1/app/{app_id}/msg…`,
`…/attempt/…`): their Svix shapes (`message_out`, `attempt_out`) and the
handlers for sending, listing, reading and resending a message and
listing attempts, rows of the Svix table (web.svix.ROUTES). A message's
id is the event id of its deliveries (its `eventId` when given, else
`msg_…`); a path takes either.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any

import orjson
from aiohttp import web

from dispatcher.core.destinations import masked_url
from dispatcher.ops import svix as ops
from dispatcher.web.keys import SETTINGS, acquire
from dispatcher.web.params import own, trace_context
from dispatcher.web.routes import Handler
from dispatcher.web.security import json_response as _json
from dispatcher.web.svix_common import (
    application,
    application_or_new,
    iterator_of,
    page_after,
    page_limit,
    page_of,
    parse_number,
    parse_when,
    read_body,
    wants_content,
)

# Payload bytes a message list page carries (one message at least): the
# memory one list call may take, however large the payloads are.
PAGE_BYTES = 4 * 1024 * 1024


def message_out(row: Mapping[str, Any], with_content: bool = True) -> dict[str, Any]:
    """`with_content` False (what the SDKs ask unless told), or a payload
    erased (expunged or expired): `{}`, as Svix."""
    payload = row["payload"] if with_content and row["payload"] is not None else "{}"
    return {
        "id": row["id"],
        "eventId": row.get("event_id"),
        "eventType": row["event_type"],
        # The stored text goes out as it is: parsing it only to encode it
        # again costs ~7x its size in Python objects (issue 32, row 11).
        "payload": orjson.Fragment(payload) if isinstance(payload, str | bytes) else payload,
        "channels": row.get("channels"),
        "tags": row.get("tags"),
        "deliverAt": row.get("deliver_at"),
        "timestamp": row["created_at"],
    }


def attempt_out(row: Mapping[str, Any]) -> dict[str, Any]:
    code = row["status_code"]
    ok = row["error"] is None and code is not None and 200 <= code < 300
    at: datetime = row["measured_at"]
    return {
        "id": f"atmpt_{row['delivery_id']}_{int(at.timestamp() * 1_000_000)}",
        "msgId": row["event_id"],
        "endpointId": str(row["endpoint_id"]),
        "url": masked_url(row["url"]),  # a broker password never shown
        # The start of the body the attempt kept (schema 024), else the
        # error class (a refused connection has no body).
        "response": row.get("excerpt") or row["error"] or "",
        "responseStatusCode": code or 0,
        "responseDurationMs": row["response_ms"],
        "status": 0 if ok else 2,
        "statusText": "success" if ok else "fail",
        "triggerType": 1 if row["resent_at"] is not None and at >= row["resent_at"] else 0,
        "timestamp": at,
    }


async def messages_create(request: web.Request) -> web.Response:
    body = await read_body(request)
    max_bytes = request.app[SETTINGS].max_payload_bytes
    async with acquire(request) as conn:
        app = await application_or_new(request, conn)
        row = await ops.send_message(
            conn, app["id"], body, max_payload_bytes=max_bytes, within_quota=True,
            trace=trace_context(request),
        )  # fmt: skip
    return _json(message_out(row, wants_content(request)), 202)


async def messages_list(request: web.Request) -> web.Response:
    """A page of at most `limit` messages and, with their content, about
    PAGE_BYTES of payloads (always one at least): fetched a few at a time,
    so one call holds a bounded amount whatever the page size. A page cut
    short by bytes is `done: false` with its iterator, as one cut by rows."""
    limit = page_limit(request)
    after = page_after(request, 2)
    event_types = request.query.getall("event_types", None)
    if event_types is not None:
        event_types = [t for v in event_types for t in v.split(",") if t]
    with_content = wants_content(request)
    batch = max(1, PAGE_BYTES // request.app[SETTINGS].max_payload_bytes)
    cursor = (parse_when(after[0]), after[1]) if after else None
    page: list[dict[str, Any]] = []
    size, full = 0, False  # full: a message past this page was seen (not done)
    async with acquire(request) as conn:
        app = await application(request, conn)
        while True:
            # One more than the page still takes, to know whether it is done.
            want = min(batch, limit - len(page) + 1)
            rows = await ops.list_messages(
                conn, app["id"], cursor, want, event_types, request.query.get("channel"),
            )  # fmt: skip
            for row in rows:
                # Characters, not bytes: close enough for a bound, and no copy.
                cost = len(row["payload"] or "") if with_content else 0
                full = len(page) == limit or (bool(page) and size + cost > PAGE_BYTES)
                if full:
                    break
                page.append(row)
                size += cost
            if full or len(rows) < want:  # the page is made, or the list ran out
                break
            cursor = (page[-1]["created_at"], page[-1]["id"])
    data = [message_out(r, with_content) for r in page]
    last = page[-1] if page else None
    key = None if last is None else (last["created_at"].isoformat(), last["id"])
    return _json({"data": data, "iterator": None if key is None else iterator_of(*key),
                  "prevIterator": None, "done": not full})  # fmt: skip


async def message_get(request: web.Request) -> web.Response:
    async with acquire(request) as conn:
        app = await application(request, conn)
        found = await ops.message(conn, app["id"], request.match_info["msg_id"])
    return _json(message_out(found, wants_content(request)))


def attempts(by: str) -> Handler:
    """A message's attempts (`by` "msg") or an endpoint's ("endpoint"), a page at a time."""

    async def handler(request: web.Request) -> web.Response:
        limit = page_limit(request)
        after = page_after(request, 2)
        async with acquire(request) as conn:
            app = await application(request, conn)
            msg_id: str | None = None
            endpoint_id: int | None = None
            if by == "msg":
                msg_id = (await ops.message(conn, app["id"], request.match_info["msg_id"]))["id"]
            else:
                endpoint_id = await ops.endpoint_id(
                    conn, app["id"], request.match_info["endpoint_id"]
                )
            rows = await ops.attempts(
                conn, app["id"], msg_id=msg_id, endpoint_id=endpoint_id,
                after=(parse_when(after[0]), parse_number(after[1])) if after else None,
                limit=limit + 1,
            )  # fmt: skip
        wanted = request.query.get("status")
        data = [attempt_out(r) for r in rows]
        if wanted is not None:
            data = [a for a in data if str(a["status"]) == wanted]
        last = rows[:limit][-1] if rows else None
        key = None if last is None else (last["measured_at"].isoformat(), str(last["delivery_id"]))
        return _json(page_of(data, limit, key))

    return handler


async def message_resend(request: web.Request) -> web.Response:
    await read_body(request)
    async with acquire(request) as conn:
        app = await application(request, conn)
        await ops.resend(
            conn, app["id"], request.match_info["msg_id"], request.match_info["endpoint_id"],
            within_quota=own(request),
        )  # fmt: skip
    return _json({}, 202)  # the Python SDK parses a body here


async def message_expunge_content(request: web.Request) -> web.Response:
    async with acquire(request) as conn:
        app = await application(request, conn)
        await ops.expunge_content(conn, app["id"], request.match_info["msg_id"])
    return web.Response(status=204)


async def messages_bulk_expunge(request: web.Request) -> web.Response:
    body = await read_body(request)
    async with acquire(request) as conn:
        app = await application(request, conn)
        results = await ops.bulk_expunge(conn, app["id"], body.get("ids") or [])
    return _json({"results": results})


async def messages_expunge_all(request: web.Request) -> web.Response:
    """Svix runs it as a background task; here it is done when this answers,
    so the task comes back finished, with what it erased."""
    async with acquire(request) as conn:
        app = await application(request, conn)
        n = await ops.expunge_all(conn, app["id"])
        now = await conn.fetchval("SELECT now()")
    task = {"id": f"qtask_purge_{app['id']}_{int(now.timestamp())}", "status": "finished",
            "task": "application.purge_content", "updatedAt": now,
            "data": {"messagesPurged": n}}  # fmt: skip
    return _json(task, 202)
