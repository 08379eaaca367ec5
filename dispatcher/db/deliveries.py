"""Data access for the deliveries browser: the deliveries list with its
filters and cursor, one delivery with its payload and attempts, dead
letters a page at a time, and the replay of an application's dead letters
since a time.

Binds named queries (queries.sql) to connections and hands back typed
rows; validates nothing a user typed (ops.browse does).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from dispatcher.core.rows import Attempt, BrowsedDelivery, DeadLetter
from dispatcher.db import Conn, Q


@dataclass(frozen=True, kw_only=True, slots=True)
class Filters:
    """What the browser narrows by; None: not narrowed."""

    app: str | None = None
    status: str | None = None
    endpoint_id: int | None = None
    event_type: str | None = None
    event_id: str | None = None
    since: datetime | None = None
    until: datetime | None = None


async def browse(
    conn: Conn, f: Filters, before_id: int | None, limit: int
) -> list[BrowsedDelivery]:
    rows = await conn.fetch(
        Q["browse_deliveries"], f.app, f.status, f.endpoint_id, f.event_type, f.event_id,
        f.since, f.until, before_id, limit,
    )  # fmt: skip
    return [BrowsedDelivery(**dict(r)) for r in rows]


async def get(
    conn: Conn, delivery_id: int, app: str | None
) -> tuple[BrowsedDelivery, str | None] | None:
    """The delivery and its payload's exact text (None once erased), or
    None (not there, or another application's)."""
    row = await conn.fetchrow(Q["get_delivery"], delivery_id, app)
    if row is None:
        return None
    doc = dict(row)
    payload: str | None = doc.pop("payload")
    return BrowsedDelivery(**doc), payload


async def attempts(conn: Conn, d: BrowsedDelivery) -> list[Attempt]:
    rows = await conn.fetch(Q["attempts_for_delivery"], d.id, d.endpoint_id, d.created_at)
    return [Attempt(**dict(r)) for r in rows]


async def dead_letters_page(
    conn: Conn,
    endpoint_id: int | None,
    limit: int,
    app: str | None,
    after: tuple[datetime, int] | None,
) -> list[DeadLetter]:
    at, last = after if after is not None else (None, None)
    rows = await conn.fetch(Q["dead_letters_page"], endpoint_id, limit, app, at, last)
    return [DeadLetter(**dict(r)) for r in rows]


async def replay_since(
    conn: Conn, app: str | None, since: datetime, until: datetime | None, limit: int
) -> int:
    async with conn.transaction():
        rows = await conn.fetch(Q["replay_since"], app, since, until, limit)
        if rows:
            await conn.execute(Q["notify_due"])
    return len(rows)
