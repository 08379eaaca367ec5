"""The Svix-compatible API under /api/v1/ (SPEC "The Svix-compatible API").

An entry point like `/v1/`: it reads Svix's camelCase bodies, calls the
same operations (ops.service, ops.tenancy, and ops.svix for what only Svix
has) and answers in the shapes the official SDKs parse. Its routes are
rows of the server's one table (`ROUTES`, joined into admin.ROUTES), so
the guard, the tenancy rules and the OpenAPI document cover them too.
Errors are `{"code", "detail"}` (security.error_response), lists are
`{"data", "iterator", "prevIterator", "done"}`.

Ids: an application's is ours (its `uid`, when it fits our id syntax, or
`app_…`); an endpoint's is our integer as a string; a message's is the
event id of its deliveries (its `eventId` when given, else `msg_…`).
Path parameters take an id or a uid, as Svix's do.
"""

from __future__ import annotations

import base64
import contextlib
import re
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

import orjson
from aiohttp import web

from dispatcher import db
from dispatcher.core.errors import BadInput, Forbidden
from dispatcher.ops import eventtypes, opswebhooks, service, tenancy
from dispatcher.ops import svix as ops
from dispatcher.ops.inputs import parse_time, spec_from_fields
from dispatcher.web import security
from dispatcher.web.keys import POOL, SETTINGS, read_object
from dispatcher.web.routes import Access, Route
from dispatcher.web.security import json_response as _json

DEFAULT_LIMIT = 50
MAX_LIMIT = 250  # Svix's own cap
# Payload bytes a message list page carries (one message at least): the
# memory one list call may take, however large the payloads are.
PAGE_BYTES = 4 * 1024 * 1024
ALL_TYPES = ["*"]


def _conn(request: web.Request) -> contextlib.AbstractAsyncContextManager[db.Conn]:
    return db.acquire(request.app[POOL])


def _scope(request: web.Request) -> str | None:
    return request.get(security.APP)


BODY: web.RequestKey[dict[str, Any]] = web.RequestKey("svix_body", dict)


async def _body(request: web.Request) -> dict[str, Any]:
    request[BODY] = doc = await read_object(request)
    return doc


def _no_content() -> web.Response:
    return web.Response(status=204)


def _with_content(request: web.Request) -> bool:
    return request.query.get("with_content", "true").lower() != "false"


def _limit(request: web.Request) -> int:
    value = request.query.get("limit")
    if value is None:
        return DEFAULT_LIMIT
    if not value.isascii() or not value.isdigit() or not 0 < int(value) <= 10_000:
        raise BadInput("limit must be a positive integer")
    return min(int(value), MAX_LIMIT)


def _iterator(request: web.Request, size: int = 1) -> list[str] | None:
    """An iterator we handed out: the `size` parts of the last item's sort
    key. Anything else (another list's, cut short, edited) is one 422."""
    value = request.query.get("iterator")
    if not value:
        return None
    try:
        parts = orjson.loads(base64.urlsafe_b64decode(value.encode() + b"==="))
    except ValueError:  # binascii.Error, orjson.JSONDecodeError, UnicodeEncodeError
        raise BadInput("iterator is not one this server handed out") from None
    if (
        not isinstance(parts, list)
        or len(parts) != size
        or not all(isinstance(p, str) and p for p in parts)
    ):
        raise BadInput("iterator is not one this server handed out")
    return parts


def _when(value: str) -> datetime:
    at = parse_time(value, "iterator")
    if at is None:
        raise BadInput("iterator is not one this server handed out")
    return at


def _number(value: str) -> int:
    if not value.isascii() or not value.isdigit() or len(value) > 18:
        raise BadInput("iterator is not one this server handed out")
    return int(value)


def _iterator_of(*parts: str) -> str:
    return base64.urlsafe_b64encode(orjson.dumps(list(parts))).decode().rstrip("=")


def _page(data: Sequence[Any], limit: int, last_key: tuple[str, ...] | None) -> dict[str, Any]:
    """`data` was fetched with one more than `limit`: whether it is done."""
    done = len(data) <= limit
    return {
        "data": list(data[:limit]),
        "iterator": None if last_key is None else _iterator_of(*last_key),
        "prevIterator": None,
        "done": done,
    }


# ---------------------------------------------------------------- shapes


def app_out(row: Mapping[str, Any]) -> dict[str, Any]:
    return {
        "id": row["id"],
        "uid": row.get("uid"),
        "name": row["name"],
        "metadata": row.get("metadata") or {},
        "throttleRate": None,
        "createdAt": row["created_at"],
        "updatedAt": row.get("updated_at") or row["created_at"],
    }


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


def message_out(row: Mapping[str, Any], with_content: bool = True) -> dict[str, Any]:
    """`with_content` False (what the SDKs ask unless told): the payload as `{}`, as Svix."""
    payload = row["payload"] if with_content else "{}"
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
        "url": row["url"],
        # Response bodies are never stored (SPEC "Limits"): the error class instead.
        "response": row["error"] or "",
        "responseStatusCode": code or 0,
        "responseDurationMs": row["response_ms"],
        "status": 0 if ok else 2,
        "statusText": "success" if ok else "fail",
        "triggerType": 1 if row["resent_at"] is not None and at >= row["resent_at"] else 0,
        "timestamp": at,
    }


# ---------------------------------------------------------------- applications


async def _app(request: web.Request, conn: db.Conn) -> dict[str, Any]:
    """The path's application. An application's credential that names
    another one anyway (`?app=`, a body's "app", as on /v1/): 403."""
    return await ops.application(conn, request.match_info["app_id"], _own(request))


def _own(request: web.Request) -> str | None:
    """The caller's application (None: the admin); naming another one
    anyway (`?app=`, a body's "app", as on /v1/) is 403."""
    own = _scope(request)
    named = (request.query.get("app"), request.get(BODY, {}).get("app"))
    if own is not None and any(n is not None and n != own for n in named):
        raise Forbidden("this credential acts only inside its own application")
    return own


async def _app_or_new(request: web.Request, conn: db.Conn) -> dict[str, Any]:
    """`_app`, or for the admin, when the body carries an `application`
    (Svix: sending a message or a portal link may create it), that one
    made with the path as its uid."""
    given = request.get(BODY, {}).get("application")
    key = request.match_info["app_id"]
    if given is None or _scope(request) is not None or await ops.application_exists(conn, key):
        return await _app(request, conn)
    if not isinstance(given, dict):
        raise BadInput("application must be an object")
    row, _ = await ops.create_application(conn, {**given, "uid": key}, get_if_exists=True)
    return row


async def apps_list(request: web.Request) -> web.Response:
    limit = _limit(request)
    after = _iterator(request)
    async with _conn(request) as conn:
        rows = await ops.list_applications(conn, after[0] if after else None, limit + 1, None)
    data = [app_out(r) for r in rows]
    return _json(_page(data, limit, (data[:limit][-1]["id"],) if data else None))


async def apps_create(request: web.Request) -> web.Response:
    body = await _body(request)
    get_if_exists = request.query.get("get_if_exists", "").lower() == "true"
    async with _conn(request) as conn:
        row, created = await ops.create_application(conn, body, get_if_exists=get_if_exists)
    return _json(app_out(row), 201 if created else 200)


async def app_get(request: web.Request) -> web.Response:
    async with _conn(request) as conn:
        return _json(app_out(await _app(request, conn)))


def _app_update(partial: bool) -> Any:
    async def handler(request: web.Request) -> web.Response:
        body = await _body(request)
        async with _conn(request) as conn:
            if not partial and not await ops.application_exists(conn, request.match_info["app_id"]):
                # PUT creates (Svix's upsert): the path names it.
                row, _ = await ops.create_application(
                    conn, {**body, "uid": request.match_info["app_id"]}, get_if_exists=True
                )
                return _json(app_out(row), 201)
            app = await _app(request, conn)
            # The scope goes down: an application's credential may change
            # its metadata only, never its uid or name (issue 32).
            row = await ops.update_application(
                conn, app["id"], body, _scope(request), partial=partial
            )
        return _json(app_out(row))

    return handler


async def app_delete(request: web.Request) -> web.Response:
    async with _conn(request) as conn:
        await ops.delete_application(conn, request.match_info["app_id"], _scope(request))
    return _no_content()


# ---------------------------------------------------------------- endpoints


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


def _secret(value: Any) -> str | None:
    """Svix takes a key with or without `whsec_`."""
    if value is None:
        return None
    if not isinstance(value, str):
        raise BadInput("secret must be a string")
    return value if value.startswith(("whsec_", "whsk_")) else f"whsec_{value}"


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
    limit = _limit(request)
    after = _iterator(request)
    async with _conn(request) as conn:
        app = await _app(request, conn)
        ids = await ops.endpoint_ids(
            conn, app["id"], _number(after[0]) if after else None, limit + 1
        )
        docs = [await service.get_endpoint(conn, i, app["id"]) for i in ids]
        data = [endpoint_out(d) for d in await ops.with_extras(conn, docs)]
    last = (data[:limit][-1]["id"],) if data else None
    return _json(_page(data, limit, last))


async def endpoints_create(request: web.Request) -> web.Response:
    body = await _body(request)
    settings = request.app[SETTINGS]
    fields = _endpoint_fields(body, replace=True)
    secret = _secret(body.get("secret"))
    if secret is not None:
        fields["secret"] = secret
    if body.get("headers") is not None:
        fields["headers"] = body["headers"]
    async with _conn(request) as conn:
        app = await _app(request, conn)
        async with conn.transaction():
            doc = await service.add_endpoint(
                conn, spec_from_fields(fields), box=settings.secret_box(),
                targets=settings.target_policy(), app=app["id"], within_quota=True,
                charged=_scope(request) is not None,
            )  # fmt: skip
            await ops.set_extras(conn, doc["id"], body, replace=True)
            await _set_disabled(conn, doc["id"], app["id"], body,
                                charged=_scope(request) is not None)  # fmt: skip
            out = await _endpoint_doc(conn, doc["id"], app["id"])
    return _json(endpoint_out(out), 201)


async def _endpoint(request: web.Request, conn: db.Conn) -> tuple[str, int]:
    app = await _app(request, conn)
    return app["id"], await ops.endpoint_id(conn, app["id"], request.match_info["endpoint_id"])


async def endpoint_get(request: web.Request) -> web.Response:
    async with _conn(request) as conn:
        app, eid = await _endpoint(request, conn)
        return _json(endpoint_out(await _endpoint_doc(conn, eid, app)))


def _endpoint_update(partial: bool) -> Any:
    async def handler(request: web.Request) -> web.Response:
        body = await _body(request)
        settings = request.app[SETTINGS]
        async with _conn(request) as conn:
            app, eid = await _endpoint(request, conn)
            async with conn.transaction():
                fields = _endpoint_fields(body, replace=not partial)
                if fields:
                    await service.update_endpoint(
                        conn, eid, fields, box=settings.secret_box(),
                        targets=settings.target_policy(), app=app,
                        charged=_scope(request) is not None,
                    )  # fmt: skip
                await ops.set_extras(conn, eid, body, replace=not partial)
                await _set_disabled(conn, eid, app, body, charged=_scope(request) is not None)
                out = await _endpoint_doc(conn, eid, app)
        return _json(endpoint_out(out))

    return handler


async def endpoint_delete(request: web.Request) -> web.Response:
    async with _conn(request) as conn:
        app, eid = await _endpoint(request, conn)
        await service.delete_endpoint(conn, eid, True, app, charged=_scope(request) is not None)
    return _no_content()


async def endpoint_secret(request: web.Request) -> web.Response:
    box = request.app[SETTINGS].secret_box()
    async with _conn(request) as conn:
        app, eid = await _endpoint(request, conn)
        return _json({"key": await service.current_secret(conn, eid, box, app)})


async def endpoint_rotate(request: web.Request) -> web.Response:
    body = await _body(request)
    box = request.app[SETTINGS].secret_box()
    async with _conn(request) as conn:
        app, eid = await _endpoint(request, conn)
        doc = await service.rotate_secret(
            conn, eid, None, box, app, secret=_secret(body.get("key"))
        )
    # Newer SDKs read the new key; older ones ignore the body.
    return _json({"key": doc["secret"]})


async def endpoint_headers(request: web.Request) -> web.Response:
    """Header values are often credentials: names only, all listed as sensitive."""
    async with _conn(request) as conn:
        app, eid = await _endpoint(request, conn)
        doc = await service.get_endpoint(conn, eid, app)
    return _json({"headers": {}, "sensitive": sorted(doc["headers"])})


def _headers_update(partial: bool) -> Any:
    async def handler(request: web.Request) -> web.Response:
        body = await _body(request)
        given = body.get("headers")
        if not isinstance(given, dict):
            raise BadInput("headers must be an object of strings")
        settings = request.app[SETTINGS]
        async with _conn(request) as conn:
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
                targets=settings.target_policy(), app=app, charged=_scope(request) is not None,
            )  # fmt: skip
        return _no_content()

    return handler


async def endpoint_recover(request: web.Request) -> web.Response:
    """Dead letters of this endpoint since `since` (until `until`) sent again."""
    body = await _body(request)
    if body.get("since") is None:
        raise BadInput("since is required")
    async with _conn(request) as conn:
        app, eid = await _endpoint(request, conn)
        await service.replay(
            conn, endpoint_id=eid, since=body["since"], until=body.get("until"), app=app,
            within_quota=_scope(request) is not None,
        )  # fmt: skip
        now = await conn.fetchval("SELECT now()")
    task = {"id": f"qtask_{eid}_{int(now.timestamp())}", "status": "finished",
            "task": "endpoint.recover", "updatedAt": now}  # fmt: skip
    return _json(task, 202)


# ---------------------------------------------------------------- messages and attempts


async def messages_create(request: web.Request) -> web.Response:
    body = await _body(request)
    max_bytes = request.app[SETTINGS].max_payload_bytes
    async with _conn(request) as conn:
        app = await _app_or_new(request, conn)
        row = await ops.send_message(
            conn, app["id"], body, max_payload_bytes=max_bytes, within_quota=True
        )
    return _json(message_out(row, _with_content(request)), 202)


async def messages_list(request: web.Request) -> web.Response:
    """A page of at most `limit` messages and, with their content, about
    PAGE_BYTES of payloads (always one at least): fetched a few at a time,
    so one call holds a bounded amount whatever the page size. A page cut
    short by bytes is `done: false` with its iterator, as one cut by rows."""
    limit = _limit(request)
    after = _iterator(request, 2)
    event_types = request.query.getall("event_types", None)
    if event_types is not None:
        event_types = [t for v in event_types for t in v.split(",") if t]
    with_content = _with_content(request)
    batch = max(1, PAGE_BYTES // request.app[SETTINGS].max_payload_bytes)
    cursor = (_when(after[0]), after[1]) if after else None
    page: list[dict[str, Any]] = []
    size, done = 0, False
    async with _conn(request) as conn:
        app = await _app(request, conn)
        while True:
            # One more than the page still takes, to know whether it is done.
            want = min(batch, limit - len(page) + 1)
            rows = await ops.list_messages(
                conn, app["id"], cursor, want, event_types, request.query.get("channel"),
            )  # fmt: skip
            for row in rows:
                # Characters, not bytes: close enough for a bound, and no copy.
                cost = len(row["payload"]) if with_content else 0
                if len(page) == limit or (page and size + cost > PAGE_BYTES):
                    break  # a message past this page: not done
                page.append(row)
                size += cost
            else:
                if len(rows) < want:
                    done = True
                    break
                cursor = (page[-1]["created_at"], page[-1]["id"])
                continue
            break
    data = [message_out(r, with_content) for r in page]
    last = page[-1] if page else None
    key = None if last is None else (last["created_at"].isoformat(), last["id"])
    return _json({"data": data, "iterator": None if key is None else _iterator_of(*key),
                  "prevIterator": None, "done": done})  # fmt: skip


async def message_get(request: web.Request) -> web.Response:
    async with _conn(request) as conn:
        app = await _app(request, conn)
        found = await ops.message(conn, app["id"], request.match_info["msg_id"])
    return _json(message_out(found, _with_content(request)))


def _attempts(by: str) -> Any:
    async def handler(request: web.Request) -> web.Response:
        limit = _limit(request)
        after = _iterator(request, 2)
        async with _conn(request) as conn:
            app = await _app(request, conn)
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
                after=(_when(after[0]), _number(after[1])) if after else None,
                limit=limit + 1,
            )  # fmt: skip
        wanted = request.query.get("status")
        data = [attempt_out(r) for r in rows]
        if wanted is not None:
            data = [a for a in data if str(a["status"]) == wanted]
        last = rows[:limit][-1] if rows else None
        key = None if last is None else (last["measured_at"].isoformat(), str(last["delivery_id"]))
        return _json(_page(data, limit, key))

    return handler


async def message_resend(request: web.Request) -> web.Response:
    await _body(request)
    async with _conn(request) as conn:
        app = await _app(request, conn)
        await ops.resend(
            conn, app["id"], request.match_info["msg_id"], request.match_info["endpoint_id"],
            within_quota=_scope(request) is not None,
        )  # fmt: skip
    return _json({}, 202)  # the Python SDK parses a body here


# ---------------------------------------------------------------- event types


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
    limit = _limit(request)
    after = _iterator(request)
    archived = request.query.get("include_archived", "").lower() == "true"
    await _body(request)
    async with _conn(request) as conn:
        docs, cut = await eventtypes.list_event_types_page(
            conn, _own(request), archived, limit + 1, after[0] if after else None
        )
    data = [event_type_out(d, _with_content(request)) for d in docs]
    page = _page(data, limit, (data[:limit][-1]["name"],) if data else None)
    page["done"] = page["done"] and not cut  # cut short by its schemas' bytes: more follow
    return _json(page)


async def event_types_create(request: web.Request) -> web.Response:
    body = await _body(request)
    fields = _event_type_fields(body)
    archived = fields.pop("archived", None)
    async with _conn(request) as conn, conn.transaction():
        doc = await eventtypes.add_event_type(conn, body.get("name"), app=_own(request), **fields)
        if archived:
            doc = await eventtypes.archive_event_type(conn, doc["name"], _own(request))
    return _json(event_type_out(doc), 201)


async def event_type_get(request: web.Request) -> web.Response:
    await _body(request)
    async with _conn(request) as conn:
        doc = await eventtypes.get_event_type(conn, request.match_info["name"], _own(request))
    return _json(event_type_out(doc))


def _event_type_update(partial: bool) -> Any:
    async def handler(request: web.Request) -> web.Response:
        body = await _body(request)
        name, scope = request.match_info["name"], _own(request)
        fields = _event_type_fields(body)
        async with _conn(request) as conn, conn.transaction():
            if not partial and not await eventtypes.exists(conn, name, scope):
                archived = fields.pop("archived", None)
                doc = await eventtypes.add_event_type(conn, name, app=scope, **fields)
                if archived:
                    doc = await eventtypes.archive_event_type(conn, name, scope)
                return _json(event_type_out(doc), 201)
            doc = await eventtypes.update_event_type(conn, name, fields, scope)
        return _json(event_type_out(doc))

    return handler


async def event_type_delete(request: web.Request) -> web.Response:
    """Archives it, as Svix; `?expunge=true` removes it."""
    expunge = request.query.get("expunge", "").lower() == "true"
    await _body(request)
    async with _conn(request) as conn:
        await eventtypes.delete_event_type(conn, request.match_info["name"], _own(request), expunge)
    return _no_content()


# ---------------------------------------------------------------- operational webhooks


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
    async with _conn(request) as conn:
        docs = await opswebhooks.list_webhooks(conn, operator_only=True)
    data = [ops_endpoint_out(d) for d in docs]
    return _json({"data": data, "iterator": None, "prevIterator": None, "done": True})


async def ops_endpoints_create(request: web.Request) -> web.Response:
    body = await _body(request)
    settings = request.app[SETTINGS]
    fields = _ops_fields(body)
    async with _conn(request) as conn, conn.transaction():
        doc = await opswebhooks.add(
            conn, fields.get("url"), event_types=fields.get("event_types"),
            secret=_secret(body.get("secret")), description=fields.get("description"),
            box=settings.secret_box(), targets=settings.target_policy(),
        )  # fmt: skip
        if fields.get("disabled"):
            doc = await opswebhooks.update(conn, doc["id"], {"disabled": True})
    return _json(ops_endpoint_out(doc), 201)


def _ops_id(request: web.Request) -> int:
    return _number(request.match_info["endpoint_id"])


async def ops_endpoint_get(request: web.Request) -> web.Response:
    async with _conn(request) as conn:
        return _json(ops_endpoint_out(await opswebhooks.get(conn, _ops_id(request))))


async def ops_endpoint_update(request: web.Request) -> web.Response:
    body = await _body(request)
    targets = request.app[SETTINGS].target_policy()
    async with _conn(request) as conn:
        doc = await opswebhooks.update(conn, _ops_id(request), _ops_fields(body), targets=targets)
    return _json(ops_endpoint_out(doc))


async def ops_endpoint_delete(request: web.Request) -> web.Response:
    async with _conn(request) as conn:
        await opswebhooks.delete(conn, _ops_id(request))
    return _no_content()


async def ops_endpoint_secret(request: web.Request) -> web.Response:
    box = request.app[SETTINGS].secret_box()
    async with _conn(request) as conn:
        return _json({"key": await opswebhooks.secret(conn, _ops_id(request), None, box)})


async def ops_endpoint_rotate(request: web.Request) -> web.Response:
    body = await _body(request)
    box = request.app[SETTINGS].secret_box()
    async with _conn(request) as conn:
        key = await opswebhooks.rotate_secret(
            conn, _ops_id(request), None, box, _secret(body.get("key"))
        )
    return _json({"key": key})


# ---------------------------------------------------------------- the portal, health


async def portal_access(request: web.Request) -> web.Response:
    """A one-time sign-in link to this application's portal (`url`); its
    code is also the `token`. `expiry` (seconds, 1 to 604800, default 3600;
    outside: 422 naming the range, as Svix answers) bounds it. Minted with
    an application token, the code also expires no later than that token
    and dies with it; a portal session may not mint one (403): access
    opened by a link must end when the link's session does."""
    body = await _body(request)
    if _scope(request) is not None and security.APP_TOKEN not in request:
        raise Forbidden("a portal session cannot mint portal access")
    base = f"{request.scheme}://{request.host}"
    async with _conn(request) as conn:
        app = await _app_or_new(request, conn)
        doc = await tenancy.portal_link(
            conn, app["id"], base, body.get("expiry"),
            minted_by=request.get(security.APP_TOKEN), ttl_name="expiry",
        )  # fmt: skip
    return _json({"url": doc["url"], "token": doc["code"]})


async def health(_: web.Request) -> web.Response:
    return _no_content()


# ---------------------------------------------------------------- the routes

OPEN, ADMIN, APP = Access.OPEN, Access.ADMIN, Access.APP
A = "/api/v1/app/{app_id}"
E = A + "/endpoint/{endpoint_id}"
OPS = "/api/v1/operational-webhook/endpoint"


_PARAM = re.compile(r"\{(\w+)\}")
_KEY = {"type": "string", "pattern": "^[a-zA-Z0-9_.-]{1,256}$"}
_OBJECT = {"type": "object"}
_RESPONSES = {
    "401": {"description": "Missing or wrong token"},
    "403": {"description": "Outside the application of the credential"},
    "404": {"description": "Not found: `{code, detail}`"},
    "409": {"description": "Conflict: `{code, detail}`"},
    "422": {"description": "Invalid input: `{code, detail: [{loc, msg, type}]}`"},
}


def _route(
    method: str,
    path: str,
    access: Access,
    handler: Any,
    summary: str,
    code: str = "200",
    *,
    body: bool = False,
) -> Route:
    """A row of the table with its OpenAPI operation: the path's
    parameters (an id or a uid each), a JSON body when it takes one."""
    operation: dict[str, Any] = {
        "summary": f"Svix: {summary}",
        "tags": ["svix"],
        "parameters": [
            {"name": name, "in": "path", "required": True, "schema": _KEY}
            for name in _PARAM.findall(path)
        ],
        "responses": {code: {"description": "OK"}, **_RESPONSES},
    }
    if body:
        operation["requestBody"] = {
            "required": False,
            "content": {"application/json": {"schema": _OBJECT}},
        }
    return Route(method, path, access, handler, operation)


# fmt: off
ROUTES: tuple[Route, ...] = (
    _route("GET",    "/api/v1/health", OPEN, health, "health", "204"),
    _route("GET",    "/api/v1/app", ADMIN, apps_list, "list applications"),
    _route("POST",   "/api/v1/app", ADMIN, apps_create,
           "create an application (?get_if_exists=true: or get it by uid)", "201", body=True),
    _route("GET",    A, APP, app_get, "get an application by id or uid"),
    _route("PUT",    A, ADMIN, _app_update(False), "create or replace an application", body=True),
    _route("PATCH",  A, APP, _app_update(True), "change an application", body=True),
    _route("DELETE", A, ADMIN, app_delete, "delete an application and its endpoints", "204"),
    _route("GET",    A + "/endpoint", APP, endpoints_list, "list endpoints"),
    _route("POST",   A + "/endpoint", APP, endpoints_create, "create an endpoint", "201",
           body=True),
    _route("GET",    E, APP, endpoint_get, "get an endpoint by id or uid"),
    _route("PUT",    E, APP, _endpoint_update(False), "replace an endpoint", body=True),
    _route("PATCH",  E, APP, _endpoint_update(True), "change an endpoint", body=True),
    _route("DELETE", E, APP, endpoint_delete,
           "delete an endpoint (what it has queued is dead-lettered)", "204"),
    _route("GET",    E + "/secret", APP, endpoint_secret, "the endpoint's signing secret"),
    _route("POST",   E + "/secret/rotate", APP, endpoint_rotate,
           "rotate the secret (the old one signs for 24 h more)", body=True),
    _route("GET",    E + "/headers", APP, endpoint_headers, "the endpoint's extra header names"),
    _route("PUT",    E + "/headers", APP, _headers_update(False),
           "replace the endpoint's headers", "204", body=True),
    _route("PATCH",  E + "/headers", APP, _headers_update(True),
           "change some of the endpoint's headers", "204", body=True),
    _route("POST",   E + "/recover", APP, endpoint_recover,
           "send the endpoint's dead letters since a time again", "202", body=True),
    _route("POST",   A + "/msg", APP, messages_create, "send a message", "202", body=True),
    _route("GET",    A + "/msg", APP, messages_list, "list messages, newest first"),
    _route("GET",    A + "/msg/{msg_id}", APP, message_get, "get a message by id or eventId"),
    _route("POST",   A + "/msg/{msg_id}/endpoint/{endpoint_id}/resend", APP, message_resend,
           "send a message to an endpoint again", "202", body=True),
    _route("GET",    A + "/attempt/msg/{msg_id}", APP, _attempts("msg"), "a message's attempts"),
    _route("GET",    A + "/attempt/endpoint/{endpoint_id}", APP, _attempts("endpoint"),
           "an endpoint's attempts"),
    _route("POST",   "/api/v1/auth/app-portal-access/{app_id}", APP, portal_access,
           "a one-time sign-in link to the application's portal", body=True),
    _route("GET",    OPS, ADMIN, ops_endpoints_list, "list the operator's operational webhooks"),
    _route("POST",   OPS, ADMIN, ops_endpoints_create, "add an operational webhook", "201",
           body=True),
    _route("GET",    OPS + "/{endpoint_id}", ADMIN, ops_endpoint_get,
           "get an operational webhook"),
    _route("PUT",    OPS + "/{endpoint_id}", ADMIN, ops_endpoint_update,
           "change an operational webhook", body=True),
    _route("DELETE", OPS + "/{endpoint_id}", ADMIN, ops_endpoint_delete,
           "delete an operational webhook", "204"),
    _route("GET",    OPS + "/{endpoint_id}/secret", ADMIN, ops_endpoint_secret,
           "an operational webhook's signing secret"),
    _route("POST",   OPS + "/{endpoint_id}/secret/rotate", ADMIN, ops_endpoint_rotate,
           "rotate an operational webhook's secret", body=True),
    _route("GET",    "/api/v1/event-type", APP, event_types_list,
           "list event types (an application's: its own and the catalogue-wide ones)"),
    _route("POST",   "/api/v1/event-type", APP, event_types_create, "create an event type",
           "201", body=True),
    _route("GET",    "/api/v1/event-type/{name}", APP, event_type_get, "get an event type"),
    _route("PUT",    "/api/v1/event-type/{name}", APP, _event_type_update(False),
           "create or replace an event type", body=True),
    _route("PATCH",  "/api/v1/event-type/{name}", APP, _event_type_update(True),
           "change an event type", body=True),
    _route("DELETE", "/api/v1/event-type/{name}", APP, event_type_delete,
           "archive an event type (?expunge=true: remove it)", "204"),
)
# fmt: on
