"""Data access for operational webhooks (schema 011): their rows, and the
emission of operational events outside the worker (the worker's recorder
emits through db.store).

An ops webhook is an endpoints row of kind 'ops'; these are the only
queries that read or write such rows by kind. It validates nothing a user
typed (ops.opswebhooks does).
"""

from __future__ import annotations

from collections.abc import Sequence

import asyncpg
import orjson

from dispatcher.core.errors import BadInput, NotFound
from dispatcher.core.opsevents import OpsEvent
from dispatcher.core.rows import OpsWebhook
from dispatcher.core.secretbox import SecretBox, seal
from dispatcher.db import Conn, Q, catalog, wake

OPERATOR, APP = "operator", "app"


def _record(row: asyncpg.Record | None, webhook_id: int | None = None) -> OpsWebhook:
    if row is None:
        raise NotFound(f"no ops webhook with id {webhook_id}")
    return OpsWebhook(
        id=row["id"],
        url=row["url"],
        sealed_secret=row["secret"],
        app=row["application_id"] if row["ops_scope"] == APP else None,
        event_types=tuple(row["event_types"]),
        description=row["description"],
        enabled=row["enabled"],
        disabled_reason=row["disabled_reason"],
        created_at=row["created_at"],
        updated_at=row["updated_at"],
    )


async def add(
    conn: Conn,
    url: str,
    secret: str,
    event_types: Sequence[str],
    description: str | None,
    app: str | None,
    box: SecretBox | None = None,
    *,
    within_quota: bool = False,
) -> OpsWebhook:
    """`app` None: the operator's (kept in application default).
    `within_quota`: an application's counts toward its max_endpoints, with
    its row locked until the insert commits, as an endpoint's (catalog)."""
    async with conn.transaction():
        if within_quota and app is not None:
            await catalog.check_endpoint_quota(conn, app)
        try:
            row = await conn.fetchrow(
                Q["insert_ops_webhook"],
                url,
                seal(box, secret),
                list(event_types),
                description,
                app or "default",
                OPERATOR if app is None else APP,
            )
        except asyncpg.ForeignKeyViolationError:
            raise BadInput(f"unknown application: {app}") from None
    return _record(row)


async def list_all(
    conn: Conn, app: str | None = None, *, operator: bool = False
) -> list[OpsWebhook]:
    """`app`'s; with `operator`, the operator's only; neither: every one."""
    return [_record(r) for r in await conn.fetch(Q["list_ops_webhooks"], app, operator)]


async def get(conn: Conn, webhook_id: int) -> OpsWebhook:
    return _record(await conn.fetchrow(Q["get_ops_webhook"], webhook_id), webhook_id)


async def update(
    conn: Conn,
    webhook_id: int,
    url: str,
    event_types: Sequence[str],
    description: str | None,
    enabled: bool,
) -> OpsWebhook:
    row = await conn.fetchrow(
        Q["update_ops_webhook"], webhook_id, url, list(event_types), description, enabled
    )
    return _record(row, webhook_id)


async def delete(conn: Conn, webhook_id: int) -> OpsWebhook:
    return _record(await conn.fetchrow(Q["delete_ops_webhook"], webhook_id), webhook_id)


async def app_wanting(conn: Conn, app: str, event_type: str) -> int:
    """The application's own ops webhooks an event of `event_type` reaches."""
    return int(await conn.fetchval(Q["app_ops_webhooks_wanting"], app, event_type))


async def emit(conn: Conn, events: Sequence[OpsEvent]) -> int:
    """Queues `events` to the ops webhooks that want them, in the caller's
    transaction; returns the deliveries queued."""
    if not events:
        return 0
    n: int = await conn.fetchval(
        Q["ops_emit"],
        [e.type for e in events],
        [e.endpoint_id for e in events],
        [e.delivery_id for e in events],
        [None if e.extra is None else orjson.dumps(e.extra).decode() for e in events],
    )
    if n:
        await wake.wake_workers(conn)
    return n
