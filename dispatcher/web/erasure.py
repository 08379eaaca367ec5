"""Erasure over HTTP (SPEC "History, payloads and retention"): an event's
payload, an application's, or every payload whose fields hold a person's
id. Each answers `{"expunged": n}` (ops/erasure.py says what stays).

Rows of the server's one table (`ROUTES`, joined into admin.ROUTES). An
application's token erases only inside its own application.
"""

from __future__ import annotations

from aiohttp import web

from dispatcher.core.errors import BadInput
from dispatcher.ops import erasure
from dispatcher.web import openapi as oas
from dispatcher.web.keys import acquire, read_object
from dispatcher.web.params import scope
from dispatcher.web.routes import Access, Route
from dispatcher.web.security import json_response as _json


async def event_content_delete(request: web.Request) -> web.Response:
    """`?app=`: the event's application (the admin's default: the one
    application that has it)."""
    app = scope(request)
    async with acquire(request) as conn:
        return _json(await erasure.expunge_event(conn, request.match_info["event_id"], app))


async def application_expunge(request: web.Request) -> web.Response:
    body = await read_object(request, ("before", "payload_contains", "app"))
    named = scope(request, body.get("app"))  # a token naming another: 403
    app = scope(request, request.match_info["app"])
    if body.get("app") is not None and named != app:
        raise BadInput("app is given twice, differently")
    async with acquire(request) as conn:
        return _json(await erasure.expunge(
            conn, app, before=body.get("before"), payload_contains=body.get("payload_contains")
        ))  # fmt: skip


async def expunge(request: web.Request) -> web.Response:
    body = await read_object(request, ("payload_contains", "app", "before"))
    if body.get("payload_contains") is None:
        # Without it this would be every payload of every application.
        raise BadInput("payload_contains is required (an application's every payload: "
                               "POST /v1/applications/{app}/expunge)")  # fmt: skip
    app = scope(request, body.get("app"))
    async with acquire(request) as conn:
        return _json(await erasure.expunge(
            conn, app, before=body.get("before"), payload_contains=body["payload_contains"]
        ))  # fmt: skip


# fmt: off
ROUTES: tuple[Route, ...] = (
    Route("DELETE", "/v1/events/{event_id}/content",    Access.APP,
          event_content_delete, oas.EVENT_EXPUNGE),
    Route("POST",   "/v1/applications/{app}/expunge",   Access.APP,
          application_expunge,  oas.APPLICATION_EXPUNGE),
    Route("POST",   "/v1/expunge",                      Access.APP,
          expunge,              oas.EXPUNGE),
)
# fmt: on
