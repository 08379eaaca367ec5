"""Svix's event types (`/api/v1/event-type…`): an event type's Svix shape
(`event_type_out`), its fields read as the catalogue's (ops.eventtypes),
and the handlers, rows of the Svix table (web.svix.ROUTES). The admin
addresses the catalogue-wide types; an application's credential its own
(reads also see the catalogue-wide).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from aiohttp import web

from dispatcher.ops import eventtypes
from dispatcher.web.keys import acquire
from dispatcher.web.routes import Handler
from dispatcher.web.security import json_response as _json
from dispatcher.web.svix_common import (
    no_content,
    page_after,
    page_limit,
    page_of,
    read_body,
    scope,
    wants_content,
)


def event_type_out(doc: Mapping[str, Any], with_content: bool = True) -> dict[str, Any]:
    flag = doc.get("feature_flag")
    return {
        "name": doc["name"],
        "description": doc.get("description") or "",
        "archived": doc["archived"],
        "deprecated": False,
        "schemas": doc.get("schemas") if with_content else None,
        "featureFlag": flag,
        "featureFlags": None if flag is None else [flag],
        "groupName": None,
        "createdAt": doc["created_at"],
        "updatedAt": doc["updated_at"],
    }


def _event_type_fields(body: Mapping[str, Any]) -> dict[str, Any]:
    """Svix's event-type fields as the catalogue's (ops.eventtypes)."""
    fields: dict[str, Any] = {}
    for theirs, ours in (("description", "description"), ("schemas", "schemas"),
                         ("archived", "archived"), ("featureFlag", "feature_flag")):  # fmt: skip
        if theirs in body:
            fields[ours] = body[theirs]
    flags = body.get("featureFlags")
    if isinstance(flags, list) and flags and "feature_flag" not in fields:
        fields["feature_flag"] = flags[0]
    return fields


async def event_types_list(request: web.Request) -> web.Response:
    limit = page_limit(request)
    after = page_after(request)
    archived = request.query.get("include_archived", "").lower() == "true"
    await read_body(request)
    async with acquire(request) as conn:
        docs, cut = await eventtypes.list_event_types_page(
            conn, scope(request), archived, limit + 1, after[0] if after else None
        )
    data = [event_type_out(d, wants_content(request)) for d in docs]
    page = page_of(data, limit, (data[:limit][-1]["name"],) if data else None)
    page["done"] = page["done"] and not cut  # cut short by its schemas' bytes: more follow
    return _json(page)


async def event_types_create(request: web.Request) -> web.Response:
    body = await read_body(request)
    fields = _event_type_fields(body)
    archived = fields.pop("archived", None)
    async with acquire(request) as conn, conn.transaction():
        doc = await eventtypes.add_event_type(conn, body.get("name"), app=scope(request), **fields)
        if archived:
            doc = await eventtypes.archive_event_type(conn, doc["name"], scope(request))
    return _json(event_type_out(doc), 201)


async def event_type_get(request: web.Request) -> web.Response:
    await read_body(request)
    async with acquire(request) as conn:
        doc = await eventtypes.get_event_type(conn, request.match_info["name"], scope(request))
    return _json(event_type_out(doc))


def event_type_update(partial: bool) -> Handler:
    """PUT (`partial` False: creates one the path names that does not exist) or PATCH."""

    async def handler(request: web.Request) -> web.Response:
        body = await read_body(request)
        name, app = request.match_info["name"], scope(request)
        fields = _event_type_fields(body)
        async with acquire(request) as conn, conn.transaction():
            if not partial and not await eventtypes.exists(conn, name, app):
                archived = fields.pop("archived", None)
                doc = await eventtypes.add_event_type(conn, name, app=app, **fields)
                if archived:
                    doc = await eventtypes.archive_event_type(conn, name, app)
                return _json(event_type_out(doc), 201)
            doc = await eventtypes.update_event_type(conn, name, fields, app)
        return _json(event_type_out(doc))

    return handler


async def event_type_delete(request: web.Request) -> web.Response:
    """Archives it, as Svix; `?expunge=true` removes it."""
    expunge = request.query.get("expunge", "").lower() == "true"
    await read_body(request)
    async with acquire(request) as conn:
        await eventtypes.delete_event_type(
            conn, request.match_info["name"], scope(request), expunge
        )
    return no_content()
