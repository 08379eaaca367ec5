"""Data access for polling endpoints (SPEC "Destinations"): acknowledging
what a consumer read, and the next page. Validates nothing (ops.polling)."""

from __future__ import annotations

from datetime import datetime

import asyncpg

from dispatcher.db import Conn, Q


async def endpoint_url(conn: Conn, endpoint_id: int) -> str | None:
    url: str | None = await conn.fetchval(Q["endpoint_url"], endpoint_id)
    return url


async def acknowledge(conn: Conn, endpoint_id: int, last_id: int, cutoff: datetime) -> int:
    """Rows the page up to `last_id`, due by its `cutoff`, showed: now delivered."""
    done = await conn.execute(Q["poll_ack"], endpoint_id, last_id, cutoff)
    return int(done.split()[-1])


async def page(
    conn: Conn, endpoint_id: int, limit: int, margin_s: float, max_bytes: int
) -> list[asyncpg.Record]:
    """The next rows, each with the page's `cutoff`: due by now less
    `margin_s`, or by now, up to the newest id, when no other transaction
    was writing the live queue just before (queries.sql poll_writers); cut
    after `max_bytes` of payloads, each with the `total` before the cut."""
    newest: int = await conn.fetchval(Q["poll_newest"])
    busy: bool = await conn.fetchval(Q["poll_writers"])
    return list(
        await conn.fetch(
            Q["poll_page"],
            endpoint_id,
            limit,
            margin_s if busy else 0.0,
            None if busy else newest,
            max_bytes,
        )
    )
