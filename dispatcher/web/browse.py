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

from aiohttp import web

from dispatcher.core.errors import BadInput
from dispatcher.ops import browse
from dispatcher.web import openapi as oas
from dispatcher.web.keys import acquire
from dispatcher.web.params import scope
from dispatcher.web.routes import Access, Route
from dispatcher.web.security import json_response as _json

NEXT_CURSOR = "X-Next-Cursor"


def _int(value: str, name: str) -> int:
    # ASCII digits only: int() also reads other scripts' digits.
    if not value.isascii() or not value.isdigit() or len(value) > 19 or not 0 < int(value) < 2**63:
        raise BadInput(f"{name} must be a positive integer")
    return int(value)


def _query_int(request: web.Request, name: str) -> int | None:
    value = request.query.get(name)
    return None if value is None else _int(value, name)


def _text(request: web.Request, name: str) -> str | None:
    """A text filter; empty is the same as absent (a form's blank field)."""
    return request.query.get(name) or None


async def deliveries(request: web.Request) -> web.Response:
    """`{"deliveries", "next_cursor"}`: newest first, filtered by any of
    status, endpoint_id, app, event_type, event_id, since, until."""
    app = scope(request)
    async with acquire(request) as conn:
        doc = await browse.list_deliveries(
            conn, app=app, status=_text(request, "status"),
            endpoint_id=_query_int(request, "endpoint_id"),
            event_type=_text(request, "event_type"), event_id=request.query.get("event_id"),
            since=_text(request, "since"), until=_text(request, "until"),
            cursor=request.query.get("cursor"), limit=_query_int(request, "limit"),
        )  # fmt: skip
    return _json(doc)


async def delivery(request: web.Request) -> web.Response:
    delivery_id = _int(request.match_info["id"], "id")
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
