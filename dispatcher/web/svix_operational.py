"""Svix's operational webhooks (`/api/v1/operational-webhook/endpoint…`):
the operator's own (SPEC "Operational webhooks"), admin only; their Svix
shape (`ops_endpoint_out`) and the handlers, rows of the Svix table
(web.svix.ROUTES). An application's operational webhooks are /v1/'s.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from aiohttp import web

from dispatcher.ops import opswebhooks
from dispatcher.web.keys import SETTINGS, acquire
from dispatcher.web.security import json_response as _json
from dispatcher.web.svix_common import no_content, parse_number, read_body, signing_key


def ops_endpoint_out(doc: Mapping[str, Any]) -> dict[str, Any]:
    types = doc["event_types"] or None
    return {
        "id": str(doc["id"]),
        "uid": None,
        "url": doc["url"],
        "description": doc.get("description") or "",
        "metadata": {},
        "disabled": doc["disabled"],
        "eventTypes": types,
        "filterTypes": types,
        "throttleRate": None,
        "createdAt": doc["created_at"],
        "updatedAt": doc.get("updated_at") or doc["created_at"],
    }


def _ops_fields(body: Mapping[str, Any]) -> dict[str, Any]:
    fields: dict[str, Any] = {}
    for theirs, ours in (("url", "url"), ("description", "description"),
                         ("disabled", "disabled")):  # fmt: skip
        if theirs in body:
            fields[ours] = body[theirs]
    key = "eventTypes" if "eventTypes" in body else "filterTypes"
    if key in body:
        fields["event_types"] = body[key] or None
    return fields


async def ops_endpoints_list(request: web.Request) -> web.Response:
    async with acquire(request) as conn:
        docs = await opswebhooks.list_webhooks(conn, operator_only=True)
    data = [ops_endpoint_out(d) for d in docs]
    return _json({"data": data, "iterator": None, "prevIterator": None, "done": True})


async def ops_endpoints_create(request: web.Request) -> web.Response:
    body = await read_body(request)
    settings = request.app[SETTINGS]
    fields = _ops_fields(body)
    async with acquire(request) as conn, conn.transaction():
        doc = await opswebhooks.add(
            conn, fields.get("url"), event_types=fields.get("event_types"),
            secret=signing_key(body.get("secret")), description=fields.get("description"),
            box=settings.secret_box(), targets=settings.target_policy(),
        )  # fmt: skip
        if fields.get("disabled"):
            doc = await opswebhooks.update(conn, doc["id"], {"disabled": True})
    return _json(ops_endpoint_out(doc), 201)


def _ops_id(request: web.Request) -> int:
    return parse_number(request.match_info["endpoint_id"])


async def ops_endpoint_get(request: web.Request) -> web.Response:
    async with acquire(request) as conn:
        return _json(ops_endpoint_out(await opswebhooks.get(conn, _ops_id(request))))


async def ops_endpoint_update(request: web.Request) -> web.Response:
    body = await read_body(request)
    targets = request.app[SETTINGS].target_policy()
    async with acquire(request) as conn:
        doc = await opswebhooks.update(conn, _ops_id(request), _ops_fields(body), targets=targets)
    return _json(ops_endpoint_out(doc))


async def ops_endpoint_delete(request: web.Request) -> web.Response:
    async with acquire(request) as conn:
        await opswebhooks.delete(conn, _ops_id(request))
    return no_content()


async def ops_endpoint_secret(request: web.Request) -> web.Response:
    box = request.app[SETTINGS].secret_box()
    async with acquire(request) as conn:
        return _json({"key": await opswebhooks.secret(conn, _ops_id(request), None, box)})


async def ops_endpoint_rotate(request: web.Request) -> web.Response:
    body = await read_body(request)
    box = request.app[SETTINGS].secret_box()
    async with acquire(request) as conn:
        key = await opswebhooks.rotate_secret(
            conn, _ops_id(request), None, box, signing_key(body.get("key"))
        )
    return _json({"key": key})
