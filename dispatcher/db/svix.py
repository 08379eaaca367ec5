"""Data access for what the Svix-compatible API adds: applications' and
endpoints' uids and metadata, endpoints' channels, messages, attempts as
Svix lists them, and idempotency keys (schema 012)."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

import asyncpg
import orjson

from dispatcher.core.errors import Conflict
from dispatcher.db import Conn, Q


def _json(value: Any) -> str | None:
    return None if value is None else orjson.dumps(value).decode()


def _row(record: Any) -> dict[str, Any] | None:
    if record is None:
        return None
    out = dict(record)
    # A payload stays the text it was sent as: that is what was signed.
    if isinstance(out.get("metadata"), str):
        out["metadata"] = orjson.loads(out["metadata"])
    return out


# ---------------------------------------------------------------- applications


async def get_app(conn: Conn, key: str) -> dict[str, Any] | None:
    return _row(await conn.fetchrow(Q["svix_app_get"], key))


async def list_apps(
    conn: Conn, after: str | None, limit: int, only: str | None = None
) -> list[dict[str, Any]]:
    rows = await conn.fetch(Q["svix_app_list"], after, limit, only)
    return [r for r in map(_row, rows) if r is not None]


async def insert_app(
    conn: Conn, app: str, name: str, uid: str | None, metadata: dict[str, str]
) -> dict[str, Any] | None:
    """None when the id or the uid is taken."""
    return _row(await conn.fetchrow(Q["svix_app_insert"], app, name, uid, _json(metadata)))


async def update_app(
    conn: Conn,
    app: str,
    *,
    name: str | None,
    uid: tuple[bool, str | None],
    metadata: dict[str, str] | None,
) -> dict[str, Any] | None:
    return _row(
        await conn.fetchrow(Q["svix_app_update"], app, name, uid[0], uid[1], _json(metadata))
    )


async def live_endpoint_ids(conn: Conn, app: str) -> list[int]:
    return [r["id"] for r in await conn.fetch(Q["svix_app_live_endpoints"], app)]


async def mark_app_deleted(conn: Conn, app: str) -> bool:
    return await conn.fetchval(Q["svix_app_delete"], app) is not None


# ---------------------------------------------------------------- endpoints


async def endpoint_extras(conn: Conn, ids: Sequence[int]) -> dict[int, dict[str, Any]]:
    rows = await conn.fetch(Q["svix_endpoint_extras"], list(ids))
    return {r["id"]: r for r in (x for x in map(_row, rows) if x is not None)}


async def set_endpoint_extras(
    conn: Conn,
    endpoint_id: int,
    *,
    uid: tuple[bool, str | None] = (False, None),
    metadata: dict[str, str] | None = None,
    channels: tuple[bool, list[str] | None] = (False, None),
) -> None:
    try:
        await conn.execute(
            Q["svix_endpoint_set_extras"], endpoint_id, uid[0], uid[1], _json(metadata),
            channels[0], channels[1],
        )  # fmt: skip
    except asyncpg.UniqueViolationError:  # endpoints_uid_idx
        raise Conflict(f"an endpoint with uid {uid[1]} already exists") from None


async def resolve_endpoint(conn: Conn, app: str, key: str) -> int | None:
    """An endpoint of `app` by its id (digits) or its uid."""
    found: int | None = await conn.fetchval(Q["svix_endpoint_resolve"], app, key)
    return found


async def endpoint_ids(conn: Conn, app: str, after: int | None, limit: int) -> list[int]:
    return [r["id"] for r in await conn.fetch(Q["svix_endpoint_ids"], app, after, limit)]


# ---------------------------------------------------------------- messages and attempts


async def insert_message(
    conn: Conn,
    app: str,
    msg_id: str,
    *,
    event_id: str | None,
    event_type: str,
    payload: str,
    channels: list[str] | None,
    tags: list[str] | None,
    deliver_at: datetime | None,
) -> dict[str, Any] | None:
    """None when the application already has a message with this id."""
    row = await conn.fetchrow(
        Q["svix_message_insert"], app, msg_id, event_id, event_type, payload, channels, tags,
        deliver_at,
    )  # fmt: skip
    return _row(row)


async def enqueue_message(
    conn: Conn,
    app: str,
    event_type: str,
    payload: str,
    msg_id: str,
    channels: list[str] | None,
    deliver_at: datetime | None,
    traceparent: str | None = None,
    tracestate: str | None = None,
) -> list[int]:
    ids = await conn.fetchval(
        Q["enqueue_message"], app, event_type, payload, msg_id, channels, deliver_at,
        traceparent, tracestate,
    )  # fmt: skip
    return list(ids)


async def get_message(conn: Conn, app: str, key: str) -> dict[str, Any] | None:
    return _row(await conn.fetchrow(Q["svix_message_get"], app, key))


async def list_messages(
    conn: Conn,
    app: str,
    after: tuple[datetime, str] | None,
    limit: int,
    event_types: list[str] | None,
    channel: str | None,
) -> list[dict[str, Any]]:
    at, last = after if after is not None else (None, None)
    rows = await conn.fetch(Q["svix_message_list"], app, at, last, limit, event_types, channel)
    return [r for r in map(_row, rows) if r is not None]


async def attempts(
    conn: Conn,
    app: str,
    *,
    msg_id: str | None,
    endpoint_id: int | None,
    after: tuple[datetime, int] | None,
    limit: int,
) -> list[dict[str, Any]]:
    at, last = after if after is not None else (None, None)
    rows = await conn.fetch(Q["svix_attempts"], app, msg_id, endpoint_id, at, last, limit)
    return [dict(r) for r in rows]


async def resend(conn: Conn, msg_id: str, endpoint_id: int) -> bool:
    return await conn.fetchval(Q["svix_resend"], msg_id, endpoint_id) is not None


async def mark_resent(conn: Conn, msg_id: str, endpoint_id: int) -> None:
    await conn.execute(Q["svix_mark_resent"], msg_id, endpoint_id)


# ---------------------------------------------------------------- idempotency keys


async def claim_key(conn: Conn, scope: str, key: str, request_hash: bytes) -> bool:
    """True: this request is the key's first (or the first since it expired)."""
    await conn.execute(Q["idempotency_expire"], scope, key)
    return await conn.fetchval(Q["idempotency_claim"], scope, key, request_hash) is not None


async def stored_answer(conn: Conn, scope: str, key: str) -> dict[str, Any] | None:
    row = await conn.fetchrow(Q["idempotency_get"], scope, key)
    return None if row is None else dict(row)


async def finish_key(conn: Conn, scope: str, key: str, status: int, body: bytes) -> None:
    await conn.execute(Q["idempotency_finish"], scope, key, status, body)


async def release_key(conn: Conn, scope: str, key: str) -> None:
    await conn.execute(Q["idempotency_release"], scope, key)
