"""The deliveries browser over HTTP: GET /v1/deliveries (filters, cursor),
GET /v1/deliveries/{id} (payload and attempts), GET /v1/dead-letters (a
page at a time).

An entry point beside admin.py: parse, call ops.browse, render. Its routes
are rows of the server's one table (`ROUTES`, joined into admin.ROUTES),
so the guard, the tenancy rules and the OpenAPI document cover them. An
application's credential reads its own application's rows only; another's
delivery answers 404 like one that does not exist.
"""

from __future__ import annotations

import csv
import io
from datetime import datetime
from typing import Any

import orjson
from aiohttp import web

from dispatcher.core.errors import BadInput
from dispatcher.ops import browse
from dispatcher.web import openapi as oas
from dispatcher.web.keys import acquire
from dispatcher.web.params import scope
from dispatcher.web.routes import Access, Route
from dispatcher.web.security import json_response as _json

NEXT_CURSOR = "X-Next-Cursor"
# An export (?format=jsonl|csv): rows read a page at a time, at most
# EXPORT_MAX a request.
EXPORT_PAGE = 1000
EXPORT_MAX = 100_000
EXPORT_COLUMNS = ["id", "endpoint_id", "app", "event_id", "event_type", "status",
                  "attempt_count", "max_attempts", "created_at", "next_attempt_at",
                  "delivered_at", "updated_at", "last_error", "last_status_code",
                  "last_response_ms", "payload_expired"]  # fmt: skip


def positive_int(value: str, name: str) -> int:
    # ASCII digits only: int() also reads other scripts' digits.
    if not value.isascii() or not value.isdigit() or len(value) > 19 or not 0 < int(value) < 2**63:
        raise BadInput(f"{name} must be a positive integer")
    return int(value)


def _query_int(request: web.Request, name: str) -> int | None:
    value = request.query.get(name)
    return None if value is None else positive_int(value, name)


def _text(request: web.Request, name: str) -> str | None:
    """A text filter; empty is the same as absent (a form's blank field)."""
    return request.query.get(name) or None


async def _page(request: web.Request, cursor: str | None, limit: int | None) -> dict[str, Any]:
    async with acquire(request) as conn:
        return await browse.list_deliveries(
            conn, app=scope(request), status=_text(request, "status"),
            endpoint_id=_query_int(request, "endpoint_id"),
            event_type=_text(request, "event_type"), event_id=request.query.get("event_id"),
            since=_text(request, "since"), until=_text(request, "until"),
            cursor=cursor, limit=limit,
        )  # fmt: skip


async def deliveries(request: web.Request) -> web.StreamResponse:
    """`{"deliveries", "next_cursor"}`: newest first, filtered by any of
    status, endpoint_id, app, event_type, event_id, since, until. With
    `format=jsonl` or `format=csv`: every delivery the filter selects,
    streamed (see `_export`)."""
    fmt = request.query.get("format", "json")
    if fmt not in ("json", "jsonl", "csv"):
        raise BadInput("format must be json, jsonl or csv")
    if fmt != "json":
        return await _export(request, fmt)
    return _json(await _page(request, request.query.get("cursor"), _query_int(request, "limit")))


async def _export(request: web.Request, fmt: str) -> web.StreamResponse:
    """Pages of EXPORT_PAGE read one after the other, each on a pooled
    connection held only while it is read, written as they come: memory
    and connections bounded whatever the client's speed. At most
    EXPORT_MAX rows a request (`?limit=` fewer); the next request continues
    with `?cursor=` the last id it got."""
    most = min(_query_int(request, "limit") or EXPORT_MAX, EXPORT_MAX)
    first = await _page(request, request.query.get("cursor"), min(EXPORT_PAGE, most))
    resp = web.StreamResponse(headers={
        "Content-Type": "application/x-ndjson" if fmt == "jsonl" else "text/csv; charset=utf-8",
        "Content-Disposition": f'attachment; filename="deliveries.{fmt}"',
    })  # fmt: skip
    await resp.prepare(request)
    if fmt == "csv":
        await resp.write(_csv_line(EXPORT_COLUMNS))
    sent, doc = 0, first
    while True:
        for d in doc["deliveries"][: most - sent]:
            line = orjson.dumps(d) + b"\n" if fmt == "jsonl" else _csv_line(
                [d.get(c) for c in EXPORT_COLUMNS])  # fmt: skip
            await resp.write(line)
            sent += 1
        if sent >= most or doc["next_cursor"] is None:
            break
        doc = await _page(request, doc["next_cursor"], min(EXPORT_PAGE, most - sent))
    await resp.write_eof()
    return resp


def _csv_line(values: list[Any]) -> bytes:
    out = io.StringIO()
    csv.writer(out).writerow(
        ["" if v is None else v.isoformat() if isinstance(v, datetime) else v for v in values]
    )
    return out.getvalue().encode()


async def delivery(request: web.Request) -> web.Response:
    delivery_id = positive_int(request.match_info["id"], "id")
    async with acquire(request) as conn:
        return _json(await browse.get_delivery(conn, delivery_id, scope(request)))


async def dead_letters(request: web.Request) -> web.Response:
    """A list, as it always was; the next page's `?cursor=` in X-Next-Cursor
    (absent on the last page), so that existing callers read the same body."""
    async with acquire(request) as conn:
        rows, nxt = await browse.dead_letters_page(
            conn, endpoint_id=_query_int(request, "endpoint_id"),
            limit=_query_int(request, "limit"), app=scope(request),
            cursor=request.query.get("cursor"),
        )  # fmt: skip
    response = _json(rows)
    if nxt is not None:
        response.headers[NEXT_CURSOR] = nxt
    return response


APP = Access.APP
# fmt: off
ROUTES: tuple[Route, ...] = (
    Route("GET",    "/v1/deliveries",                       APP,
          deliveries,              oas.DELIVERIES),
    Route("GET",    "/v1/deliveries/{id:[0-9]+}",           APP,
          delivery,                oas.DELIVERY_GET),
    Route("GET",    "/v1/dead-letters",                     APP,
          dead_letters,            oas.DEAD_LETTERS),
)
# fmt: on
