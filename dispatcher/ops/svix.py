"""The operations the Svix-compatible API adds over the service's own.

Svix's routes (web.svix) are another entry point: an endpoint is created,
changed, disabled or deleted by `service`, an application by `tenancy`,
exactly as `/v1/` and the CLI do. What lives here is only what Svix has
and we did not: finding an application or an endpoint by its `uid`, their
metadata, endpoints' channels, messages (an event with its own record),
attempts listed per message or per endpoint, and resending.

`scope` everywhere is the caller's application (an application's token or
portal session), None for the admin: an object of another application is
NotFound, as on `/v1/`.
"""

from __future__ import annotations

import re
import secrets
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from dispatcher.core.attemptdetail import secret_header, trace_context
from dispatcher.core.errors import BadInput, Conflict, Forbidden, NotFound
from dispatcher.core.secretbox import SecretBox, unseal
from dispatcher.db import Conn
from dispatcher.db import svix as store
from dispatcher.ops import erasure, service, tenancy
from dispatcher.ops.eventtypes import validate_payload
from dispatcher.ops.inputs import (
    check_deliver_at,
    check_metadata_size,
    payload_text,
)

UID = re.compile(r"[a-zA-Z0-9_.-]{1,256}")
# Message ids one bulk-expunge call takes (each is one short statement).
BULK_EXPUNGE_MAX = 1000


def check_uid(value: Any, what: str = "uid") -> str | None:
    if value is None:
        return None
    if not isinstance(value, str) or not UID.fullmatch(value) or value.isdigit():
        raise BadInput(f"{what} must be 1-256 of a-z, A-Z, 0-9, _, . and -, not only digits")
    return value


def check_metadata(value: Any) -> dict[str, str] | None:
    if value is None:
        return None
    if not isinstance(value, dict) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in value.items()
    ):
        raise BadInput("metadata must be an object of strings")
    check_metadata_size(value)
    return value


def check_names(value: Any, what: str) -> list[str] | None:
    if value is None:
        return None
    if not isinstance(value, list) or not all(
        isinstance(v, str) and 0 < len(v) <= 128 for v in value
    ):
        raise BadInput(f"{what} must be a list of names")
    if len(value) > 10:
        raise BadInput(f"{what}: at most 10")
    return list(dict.fromkeys(value))


# ---------------------------------------------------------------- applications


async def application(conn: Conn, key: str, scope: str | None) -> dict[str, Any]:
    """By id or uid; another application's, or none: NotFound."""
    found = await store.get_app(conn, key)
    if found is None or (scope is not None and found["id"] != scope):
        raise NotFound("no such application")
    return found


async def create_application(
    conn: Conn, body: Mapping[str, Any], *, get_if_exists: bool
) -> tuple[dict[str, Any], bool]:
    """The application and whether it is new. A `uid` that fits our id
    syntax is also its id; otherwise the id is generated."""
    uid = check_uid(body.get("uid"))
    name = tenancy.check_name(body.get("name"))
    metadata = check_metadata(body.get("metadata")) or {}
    if uid is not None:
        existing = await store.get_app(conn, uid)
        if existing is not None:
            if get_if_exists:
                return existing, False
            raise Conflict(f"an application with uid {uid} already exists")
    app = (
        uid if uid is not None and tenancy.APP_ID.fullmatch(uid) else f"app_{secrets.token_hex(12)}"
    )
    row = await store.insert_app(conn, app, name, uid, metadata)
    if row is None:
        if uid is not None and app == uid:  # the id is taken (by a deleted one): another id
            row = await store.insert_app(conn, f"app_{secrets.token_hex(12)}", name, uid, metadata)
        if row is None:
            raise Conflict("an application with this id or uid already exists")
    return row, True


async def list_applications(
    conn: Conn, after: str | None, limit: int, scope: str | None
) -> list[dict[str, Any]]:
    return await store.list_apps(conn, after, limit, scope)


async def update_application(
    conn: Conn, key: str, body: Mapping[str, Any], scope: str | None, *, partial: bool
) -> dict[str, Any]:
    """PUT (`partial` False: name required, absent uid/metadata cleared) or PATCH.

    With `scope` (an application's own credential): its metadata only. Its
    uid and name are the operator's: a tenant that took a future customer's
    uid would receive, through the operator's get-or-create by uid, that
    customer's messages; one that took another's name would pass for it in
    the console (issue 32). Sending them unchanged is no change and allowed."""
    app = await application(conn, key, scope)
    name = None if body.get("name") is None else tenancy.check_name(body["name"])
    if not partial and name is None:
        raise BadInput("name is required")
    uid_given = "uid" in body or not partial
    uid = check_uid(body.get("uid"))
    if scope is not None and (
        (name is not None and name != app["name"]) or (uid_given and uid != app["uid"])
    ):
        raise Forbidden("an application's credential may change its metadata, not its uid or name")
    metadata = check_metadata(body.get("metadata"))
    if not partial and metadata is None:
        metadata = {}
    row = await store.update_app(
        conn, app["id"], name=name, uid=(uid_given, uid), metadata=metadata,
    )  # fmt: skip
    if row is None:
        raise NotFound("no such application")
    return row


async def delete_application(conn: Conn, key: str, scope: str | None) -> None:
    """Its endpoints deleted (what they had queued dead-lettered, as
    `endpoint delete --force`), its credentials revoked."""
    app = await application(conn, key, scope)
    if app["id"] == tenancy.DEFAULT_APP:
        raise BadInput("the default application cannot be deleted")
    async with conn.transaction():
        for endpoint_id in await store.live_endpoint_ids(conn, app["id"]):
            await service.delete_endpoint(conn, endpoint_id, True, app["id"])
        await store.mark_app_deleted(conn, app["id"])


# ---------------------------------------------------------------- endpoints


async def endpoint_id(conn: Conn, app: str, key: str) -> int:
    found = await store.resolve_endpoint(conn, app, key)
    if found is None:
        raise NotFound("no such endpoint")
    return found


async def with_extras(conn: Conn, docs: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """Endpoint documents (service.endpoint_public) with uid, metadata and channels."""
    extras = await store.endpoint_extras(conn, [d["id"] for d in docs])
    out = []
    for doc in docs:
        extra = extras.get(doc["id"], {})
        out.append({**doc, **{k: extra.get(k) for k in ("uid", "metadata", "channels")}})
    return out


async def set_extras(conn: Conn, endpoint: int, body: Mapping[str, Any], *, replace: bool) -> None:
    """uid, metadata and channels from a Svix body; `replace` (create, PUT):
    absent ones are cleared."""
    uid = check_uid(body.get("uid"))
    metadata = check_metadata(body.get("metadata"))
    channels = check_names(body.get("channels"), "channels")
    await store.set_endpoint_extras(
        conn, endpoint,
        uid=("uid" in body or replace, uid),
        metadata={} if replace and metadata is None else metadata,
        channels=("channels" in body or replace, channels or None),
    )  # fmt: skip


# ---------------------------------------------------------------- messages


def new_message_id() -> str:
    return f"msg_{secrets.token_hex(13)}"


async def send_message(
    conn: Conn,
    app: str,
    body: Mapping[str, Any],
    *,
    max_payload_bytes: int,
    within_quota: bool,
    trace: tuple[str | None, str | None] = (None, None),
) -> dict[str, Any]:
    """A message: recorded, and a delivery per endpoint its type, filter
    and channels select, due at `deliverAt` (now when absent). A repeated
    `eventId` in the application: Conflict, nothing queued. `trace`: the
    request's traceparent and tracestate, which every attempt joins."""
    event_type = body.get("eventType")
    if not isinstance(event_type, str) or not UID.fullmatch(event_type):
        # Svix's rule for a message's type, the catalogue's (SPEC "Event types").
        raise BadInput("eventType must be 1-256 of a-z, A-Z, 0-9, _, . and -")
    payload = body.get("payload")
    if not isinstance(payload, dict):
        raise BadInput("payload must be a JSON object")
    text = payload_text(payload, max_payload_bytes)
    given = body.get("eventId")
    if given is not None and (not isinstance(given, str) or not UID.fullmatch(given)):
        raise BadInput("eventId must be 1-256 of a-z, A-Z, 0-9, _, . and -")
    channels = check_names(body.get("channels"), "channels")
    tags = check_names(body.get("tags"), "tags")
    deliver_at: datetime | None = None
    if body.get("deliverAt") is not None:
        deliver_at = check_deliver_at(body["deliverAt"], "deliverAt")
    msg_id = given or new_message_id()
    if within_quota:  # first: a throttled tenant costs no validation
        await service.take_event_quota(conn, app, 1)
    await validate_payload(conn, app, event_type, text)
    async with conn.transaction():
        row = await store.insert_message(
            conn, app, msg_id, event_id=given, event_type=event_type, payload=text,
            channels=channels, tags=tags, deliver_at=deliver_at,
        )  # fmt: skip
        if row is None:
            raise Conflict(f"a message with eventId {msg_id} already exists")
        parent, state = trace_context(*trace)
        await store.enqueue_message(
            conn, app, event_type, text, msg_id, channels, deliver_at, parent, state
        )
    return row


async def message(conn: Conn, app: str, key: str) -> dict[str, Any]:
    found = await store.get_message(conn, app, key)
    if found is None:
        raise NotFound("no such message")
    return found


async def resend(
    conn: Conn, app: str, msg_key: str, endpoint_key: str, *, within_quota: bool = False
) -> None:
    """The message to the endpoint again now: a delivery that ended
    (delivered or dead) starts over; none yet (subscribed since): a new one.
    `within_quota` (an application's own credential): one event taken from
    its max_events_per_s first; past it Throttled, and nothing resent."""
    msg = await message(conn, app, msg_key)
    endpoint = await endpoint_id(conn, app, endpoint_key)
    if msg.get("payload_expired"):
        raise Conflict("the message's payload was expunged or has expired: it cannot be resent")
    if within_quota:
        await service.take_event_quota(conn, app, 1)
    if not await store.resend(conn, msg["id"], endpoint):
        await store_enqueue_to(conn, app, msg, endpoint)


async def store_enqueue_to(conn: Conn, app: str, msg: Mapping[str, Any], endpoint: int) -> None:
    async with conn.transaction():
        await service.enqueue(conn, msg["event_type"], msg["payload"], msg["id"], endpoint, app=app)
        await store.mark_resent(conn, msg["id"], endpoint)


async def expunge_content(conn: Conn, app: str, msg_key: str) -> None:
    """Svix's "delete message content": the message's payload and its
    deliveries' (ops.erasure); an unknown message is NotFound."""
    msg = await message(conn, app, msg_key)
    await erasure.expunge_message(conn, app, msg["id"])


async def bulk_expunge(conn: Conn, app: str, ids: Any) -> dict[str, str]:
    """Svix's bulk-expunge: `{id: "expunged" | "not-found"}` per id given."""
    if not isinstance(ids, list) or not all(isinstance(i, str) for i in ids):
        raise BadInput("ids must be a list of message ids")
    if len(ids) > BULK_EXPUNGE_MAX:
        raise BadInput(f"ids takes at most {BULK_EXPUNGE_MAX} message ids")
    results: dict[str, str] = {}
    for key in ids:
        found = await store.get_message(conn, app, key)
        if found is None:
            results[key] = "not-found"
        else:
            await erasure.expunge_message(conn, app, found["id"])
            results[key] = "expunged"
    return results


async def expunge_all(conn: Conn, app: str) -> int:
    """Every payload of the application: the events erased."""
    return (await erasure.expunge(conn, app))["expunged"]


# ---------------------------------------------------------------- lists (newest or lowest first)


async def application_exists(conn: Conn, key: str) -> bool:
    return await store.get_app(conn, key) is not None


async def endpoint_ids(conn: Conn, app: str, after: int | None, limit: int) -> list[int]:
    return await store.endpoint_ids(conn, app, after, limit)


async def list_messages(
    conn: Conn,
    app: str,
    after: tuple[datetime, str] | None,
    limit: int,
    event_types: list[str] | None,
    channel: str | None,
) -> list[dict[str, Any]]:
    return await store.list_messages(conn, app, after, limit, event_types, channel)


async def attempts(
    conn: Conn,
    app: str,
    *,
    msg_id: str | None,
    endpoint_id: int | None,
    after: tuple[datetime, int] | None,
    limit: int,
) -> list[dict[str, Any]]:
    return await store.attempts(
        conn, app, msg_id=msg_id, endpoint_id=endpoint_id, after=after, limit=limit
    )


async def endpoint_headers(
    conn: Conn, endpoint_id: int, app: str, box: SecretBox | None
) -> dict[str, Any]:
    """Svix's `GET …/endpoint/{id}/headers`: the values of the headers whose
    names do not say credential, as Svix shows them; the others by name
    only, under `sensitive` (their values are never shown, as everywhere)."""
    record = await service.endpoint_record(conn, endpoint_id, app)
    shown: dict[str, str] = {}
    sensitive: list[str] = []
    for name, value in record.headers:
        if secret_header(name):
            sensitive.append(name)
        else:
            shown[name] = unseal(box, value)
    return {"headers": shown, "sensitive": sorted(sensitive)}


# Svix API features with no equivalent here, by a word of their path
# (SPEC: they answer 404 with a detail that says so).
_SVIX_ABSENT = (
    ("transformation", "transformations"),
    ("environment", "environments"),
    ("billing", "billing"),
    ("stats", "usage statistics"),
    ("integration", "integrations"),
    ("background-task", "background tasks"),
)


def missing_route(path: str) -> str:
    """The detail of a Svix API route that is not here."""
    for word, what in _SVIX_ABSENT:
        if word in path:
            return f"{what}: no equivalent in dispatcher's Svix-compatible API"
    return "no such route in dispatcher's Svix-compatible API"
