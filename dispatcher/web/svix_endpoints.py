"""Svix's endpoints (`/api/v1/app/{app_id}/endpoint…`): an endpoint's Svix
shape (`endpoint_out`), its fields read as ours, and the handlers for the
endpoint, its secret, its headers and recovering its dead letters, rows
of the Svix table (web.svix.ROUTES). An endpoint's id is our integer as
a string; a path takes it or the endpoint's `uid`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from aiohttp import web

from dispatcher import db
from dispatcher.core.errors import BadInput
from dispatcher.ops import service
from dispatcher.ops import svix as ops
from dispatcher.ops.inputs import spec_from_fields
from dispatcher.web.keys import SETTINGS, acquire
from dispatcher.web.params import own
from dispatcher.web.routes import Handler
from dispatcher.web.security import json_response as _json
from dispatcher.web.svix_common import (
    ALL_TYPES,
    application,
    no_content,
    page_after,
    page_limit,
    page_of,
    parse_number,
    read_body,
    signing_key,
)


def endpoint_out(doc: Mapping[str, Any]) -> dict[str, Any]:
    types = list(doc["event_types"])
    subscribed = None if types == ALL_TYPES else types
    rate = doc.get("rate_per_s")
    return {
        "id": str(doc["id"]),
        "uid": doc.get("uid"),
        "url": doc["url"],
        "description": doc.get("description") or "",
        "metadata": doc.get("metadata") or {},
        "disabled": not doc["enabled"],
        "eventTypes": subscribed,
        "filterTypes": subscribed,  # the name older SDKs read
        "channels": doc.get("channels"),
        "throttleRate": None if rate is None else max(1, round(rate)),
        "rateLimit": None if rate is None else max(1, round(rate)),
        "version": 1,
        "createdAt": doc["created_at"],
        "updatedAt": doc.get("updated_at") or doc["created_at"],
    }


def _endpoint_fields(body: Mapping[str, Any], *, replace: bool) -> dict[str, Any]:
    """Svix's endpoint fields as ours (service.spec_from_fields); `replace`
    (create, PUT): absent ones take their defaults."""
    fields: dict[str, Any] = {}
    if "url" in body or replace:
        fields["url"] = body.get("url")
    if "description" in body or replace:
        fields["description"] = body.get("description") or None
    types_key = "eventTypes" if "eventTypes" in body else "filterTypes"
    if types_key in body or replace:
        types = body.get(types_key)
        fields["event_types"] = ALL_TYPES if not types else types
    rate_key = "throttleRate" if "throttleRate" in body else "rateLimit"
    if rate_key in body or replace:
        fields["rate_per_s"] = body.get(rate_key)
    return fields


async def _endpoint_doc(conn: db.Conn, endpoint_id: int, app: str) -> dict[str, Any]:
    doc = await service.get_endpoint(conn, endpoint_id, app)
    return (await ops.with_extras(conn, [doc]))[0]


async def _set_disabled(
    conn: db.Conn, endpoint_id: int, app: str, body: Mapping[str, Any], *, charged: bool
) -> None:
    disabled = body.get("disabled")
    if disabled is None:
        return
    if not isinstance(disabled, bool):
        raise BadInput("disabled must be true or false")
    await service.set_enabled(conn, endpoint_id, not disabled, app, charged=charged)


async def endpoints_list(request: web.Request) -> web.Response:
    limit = page_limit(request)
    after = page_after(request)
    async with acquire(request) as conn:
        app = await application(request, conn)
        ids = await ops.endpoint_ids(
            conn, app["id"], parse_number(after[0]) if after else None, limit + 1
        )
        docs = [await service.get_endpoint(conn, i, app["id"]) for i in ids]
        data = [endpoint_out(d) for d in await ops.with_extras(conn, docs)]
    last = (data[:limit][-1]["id"],) if data else None
    return _json(page_of(data, limit, last))


async def endpoints_create(request: web.Request) -> web.Response:
    body = await read_body(request)
    settings = request.app[SETTINGS]
    fields = _endpoint_fields(body, replace=True)
    secret = signing_key(body.get("secret"))
    if secret is not None:
        fields["secret"] = secret
    if body.get("headers") is not None:
        fields["headers"] = body["headers"]
    async with acquire(request) as conn:
        app = await application(request, conn)
        async with conn.transaction():
            doc = await service.add_endpoint(
                conn, spec_from_fields(fields), box=settings.secret_box(),
                targets=settings.target_policy(), app=app["id"], within_quota=True,
                charged=own(request),
            )  # fmt: skip
            await ops.set_extras(conn, doc["id"], body, replace=True)
            await _set_disabled(conn, doc["id"], app["id"], body, charged=own(request))
            out = await _endpoint_doc(conn, doc["id"], app["id"])
    return _json(endpoint_out(out), 201)


async def _endpoint(request: web.Request, conn: db.Conn) -> tuple[str, int]:
    app = await application(request, conn)
    return app["id"], await ops.endpoint_id(conn, app["id"], request.match_info["endpoint_id"])


async def endpoint_get(request: web.Request) -> web.Response:
    async with acquire(request) as conn:
        app, eid = await _endpoint(request, conn)
        return _json(endpoint_out(await _endpoint_doc(conn, eid, app)))


def endpoint_update(partial: bool) -> Handler:
    """PUT (`partial` False: fields left out take their defaults) or PATCH."""

    async def handler(request: web.Request) -> web.Response:
        body = await read_body(request)
        settings = request.app[SETTINGS]
        async with acquire(request) as conn:
            app, eid = await _endpoint(request, conn)
            async with conn.transaction():
                fields = _endpoint_fields(body, replace=not partial)
                if fields:
                    await service.update_endpoint(
                        conn, eid, fields, box=settings.secret_box(),
                        targets=settings.target_policy(), app=app, charged=own(request),
                    )  # fmt: skip
                await ops.set_extras(conn, eid, body, replace=not partial)
                await _set_disabled(conn, eid, app, body, charged=own(request))
                out = await _endpoint_doc(conn, eid, app)
        return _json(endpoint_out(out))

    return handler


async def endpoint_delete(request: web.Request) -> web.Response:
    async with acquire(request) as conn:
        app, eid = await _endpoint(request, conn)
        await service.delete_endpoint(conn, eid, True, app, charged=own(request))
    return no_content()


async def endpoint_secret(request: web.Request) -> web.Response:
    box = request.app[SETTINGS].secret_box()
    async with acquire(request) as conn:
        app, eid = await _endpoint(request, conn)
        return _json({"key": await service.current_secret(conn, eid, box, app)})


async def endpoint_rotate(request: web.Request) -> web.Response:
    body = await read_body(request)
    box = request.app[SETTINGS].secret_box()
    async with acquire(request) as conn:
        app, eid = await _endpoint(request, conn)
        doc = await service.rotate_secret(
            conn, eid, None, box, app, secret=signing_key(body.get("key"))
        )
    # Newer SDKs read the new key; older ones ignore the body.
    return _json({"key": doc["secret"]})


async def endpoint_headers(request: web.Request) -> web.Response:
    box = request.app[SETTINGS].secret_box()
    async with acquire(request) as conn:
        app, eid = await _endpoint(request, conn)
        return _json(await ops.endpoint_headers(conn, eid, app, box))


def headers_update(partial: bool) -> Handler:
    """PUT (the headers given, only) or PATCH (`deleteHeaders` removed, the rest kept)."""

    async def handler(request: web.Request) -> web.Response:
        body = await read_body(request)
        given = body.get("headers")
        if not isinstance(given, dict):
            raise BadInput("headers must be an object of strings")
        settings = request.app[SETTINGS]
        async with acquire(request) as conn:
            app, eid = await _endpoint(request, conn)
            headers: dict[str, Any] = {}
            if partial:
                current = (await service.get_endpoint(conn, eid, app))["headers"]
                headers = dict(current)  # masked values keep what is stored
                gone = body.get("deleteHeaders") or []
                if not isinstance(gone, list) or not all(isinstance(n, str) for n in gone):
                    raise BadInput("deleteHeaders must be a list of header names")
                for name in gone:
                    headers.pop(name, None)
            for name, value in given.items():
                if value is None:
                    headers.pop(name, None)
                else:
                    headers[name] = value
            await service.update_endpoint(
                conn, eid, {"headers": headers}, box=settings.secret_box(),
                targets=settings.target_policy(), app=app, charged=own(request),
            )  # fmt: skip
        return no_content()

    return handler


async def endpoint_recover(request: web.Request) -> web.Response:
    """Dead letters of this endpoint since `since` (until `until`) sent again."""
    body = await read_body(request)
    if body.get("since") is None:
        raise BadInput("since is required")
    async with acquire(request) as conn:
        app, eid = await _endpoint(request, conn)
        await service.replay(
            conn, endpoint_id=eid, since=body["since"], until=body.get("until"), app=app,
            within_quota=own(request),
        )  # fmt: skip
        now = await conn.fetchval("SELECT now()")
    task = {"id": f"qtask_{eid}_{int(now.timestamp())}", "status": "finished",
            "task": "endpoint.recover", "updatedAt": now}  # fmt: skip
    return _json(task, 202)
