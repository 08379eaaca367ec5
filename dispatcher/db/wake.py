"""The wake-up switch (schema 016): how idle workers learn of new rows.

Read by the worker's refresher and by the operators' commands, written by
the latter; the enqueue functions obey it in SQL (schema 016).
Statements that queue rows outside those functions (the bulk COPY, ops
events) call `wake_workers` so that `notify` mode misses none of them.
"""

from __future__ import annotations

from datetime import datetime

from dispatcher.core.models import WakeMode
from dispatcher.db import Conn, Q


async def read(conn: Conn) -> tuple[WakeMode, datetime | None]:
    """The switch, and when it was last set (None: never stored)."""
    row = await conn.fetchrow(Q["wake_mode"])
    assert row is not None  # one row, always
    return WakeMode(row["wake"]), row["updated_at"]


async def write(conn: Conn, wanted: WakeMode) -> tuple[WakeMode, datetime]:
    """Stores the switch; the workers re-read it at once (a trigger tells
    them). Returns it as stored, with when."""
    row = await conn.fetchrow(Q["set_wake_mode"], wanted.value)
    assert row is not None  # an upsert returns its row
    return WakeMode(row["wake"]), row["updated_at"]


async def wake_workers(conn: Conn) -> None:
    """In the caller's transaction: NOTIFY the workers if the switch says so."""
    await conn.execute(Q["wake_workers"])
