"""Data access for polling endpoints (SPEC "Destinations"): acknowledging
what a consumer read, and the next page. Validates nothing (ops.polling)."""

from __future__ import annotations

from datetime import datetime

import asyncpg

from dispatcher.db import Conn, Q


async def endpoint_url(conn: Conn, endpoint_id: int) -> str | None:
    url: str | None = await conn.fetchval(Q["endpoint_url"], endpoint_id)
    return url


async def acknowledge(
    conn: Conn, endpoint_id: int, last_id: int, read_at: datetime, margin_s: float
) -> int:
    """Rows the page up to `last_id`, read at `read_at`, showed: now delivered."""
    done = await conn.execute(Q["poll_ack"], endpoint_id, last_id, read_at, margin_s)
    return int(done.split()[-1])


async def page(conn: Conn, endpoint_id: int, limit: int, margin_s: float) -> list[asyncpg.Record]:
    return list(await conn.fetch(Q["poll_page"], endpoint_id, limit, margin_s))
