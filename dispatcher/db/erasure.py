"""Data access for erasure (SPEC "History, payloads and retention"): one
event's payload at once, or every payload a request selects, a stretch of
the primary key at a time.

Validates nothing a user typed (ops.erasure does).
"""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any

from dispatcher.db import Conn, Q

# Ids per step of a bulk erasure: each step is its own short transaction,
# so a claim never waits behind an application's whole history.
STEP_IDS = 20_000


async def expunge_event(conn: Conn, app: str, event_id: str, *, operator_ops: bool) -> int:
    """1 when the event had a payload left in `app` (its deliveries or its
    Svix message), else 0."""
    return int(await conn.fetchval(Q["expunge_event"], app, event_id, operator_ops))


async def expunge(
    conn: Conn,
    app: str | None,
    *,
    before: datetime | None = None,
    contains: dict[str, Any] | None = None,
    step: int = STEP_IDS,
) -> int:
    """Every payload of `app` (None: of every application) enqueued before
    `before`, whose top-level keys include `contains` with equal values:
    the number of events erased."""
    match = None if contains is None else json.dumps(contains)
    start = await conn.fetchrow(Q["erasure_start"])
    assert start is not None
    erased: set[tuple[str, str]] = set()
    count = 0
    cursor = 0
    while cursor < start["newest"]:
        rows = await conn.fetch(Q["expunge_batch"], cursor, step, app, before, match)
        # An event's rows are one INSERT's, so they sit in one or two
        # neighbouring steps: counting against the step before is exact
        # without holding every event id of the walk.
        seen = {(r["app"], r["event_id"]) for r in rows}
        count += len(seen - erased)
        erased = seen
        cursor += step
    messages = await conn.fetchval(Q["expunge_messages"], app, before, match, start["began"])
    return count + int(messages)
