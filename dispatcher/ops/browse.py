"""The deliveries browser: deliveries found by any of their fields, newest
first, a page at a time; one delivery with its payload and attempts; dead
letters a page at a time. Shared by the admin API, the console and the
portal (which call the API).

Cursors are opaque to callers: the position after the last row of a page.
A payload is returned to the caller who may see it (the operator, its own
application) and never logged.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import orjson

from dispatcher.core.attemptdetail import attempt_doc
from dispatcher.core.errors import BadInput, NotFound
from dispatcher.core.rows import as_dict
from dispatcher.db import Conn, catalog
from dispatcher.db import deliveries as db
from dispatcher.ops.inputs import check_event_id, parse_time
from dispatcher.ops.reports import STATUSES, deliveries_for_event

DEFAULT_LIMIT = 100
MAX_LIMIT = 1000  # SPEC "Limits": list routes cap limit at 1000
_TYPE_MAX = 256


def _limit(limit: int | None) -> int:
    n = DEFAULT_LIMIT if limit is None else limit
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise BadInput("limit must be at least 1")
    return min(n, MAX_LIMIT)


def _id_cursor(cursor: str | None) -> int | None:
    if cursor is None or cursor == "":
        return None
    if not cursor.isascii() or not cursor.isdigit() or len(cursor) > 19 or int(cursor) < 1:
        raise BadInput("cursor is not one this server handed out: start again without it")
    return int(cursor)


async def list_deliveries(
    conn: Conn,
    *,
    app: str | None = None,
    status: str | None = None,
    endpoint_id: int | None = None,
    event_type: str | None = None,
    event_id: str | None = None,
    since: str | datetime | None = None,
    until: str | datetime | None = None,
    cursor: str | None = None,
    limit: int | None = None,
) -> dict[str, Any]:
    """`{"deliveries", "next_cursor"}`, newest first. With `event_id`, each
    delivery also carries its attempts (SPEC "Admin HTTP API"); `next_cursor`
    is None on the last page."""
    if status is not None and status not in STATUSES:
        raise BadInput(f"status must be one of {', '.join(STATUSES)}")
    if event_type is not None and not 0 < len(event_type) <= _TYPE_MAX:
        raise BadInput(f"event_type must be 1..{_TYPE_MAX} characters")
    if event_id is not None and check_event_id(event_id or None) is None:
        raise BadInput("event_id must be 1..200 printable characters")
    if endpoint_id is not None and app is not None:
        await catalog.check_owner(conn, endpoint_id, app)
    start, end = parse_time(since, "since"), parse_time(until, "until")
    # One event's deliveries are one per endpoint: all of them on one page,
    # as `?event_id=` always answered, unless a smaller page is asked for.
    n = _limit(MAX_LIMIT if limit is None and event_id is not None else limit)
    f = db.Filters(app=app, status=status, endpoint_id=endpoint_id, event_type=event_type,
                   event_id=event_id, since=start, until=end)  # fmt: skip
    rows = await db.browse(conn, f, _id_cursor(cursor), n + 1)
    page = [as_dict(r) for r in rows[:n]]
    if event_id is not None and page:
        attempts = {d["id"]: d["attempts"] for d in await deliveries_for_event(conn, event_id, app)}
        for d in page:
            d["attempts"] = attempts.get(d["id"], [])
    return {"deliveries": page, "next_cursor": str(rows[n - 1].id) if len(rows) > n else None}


async def get_delivery(conn: Conn, delivery_id: int, app: str | None = None) -> dict[str, Any]:
    """One delivery with its payload (as enqueued) and its attempts, oldest
    first. Another application's reads as missing."""
    found = await db.get(conn, delivery_id, app)
    if found is None:
        raise NotFound(f"no delivery with id {delivery_id}")
    d, payload = found
    doc = as_dict(d)
    # Erased (expunged, or past DISPATCHER_RETENTION_PAYLOAD_S): null, and
    # payload_expired says why.
    doc["payload"] = None if payload is None else orjson.loads(payload)
    doc["attempts"] = [attempt_doc(as_dict(a)) for a in await db.attempts(conn, d)]
    return doc


def _dead_cursor(cursor: str | None) -> tuple[datetime, int] | None:
    """`<microseconds since the epoch>.<id>` of the last dead letter shown."""
    if cursor is None or cursor == "":
        return None
    at, dot, last = cursor.partition(".")
    if (
        not (dot and at.isascii() and at.isdigit() and last.isascii() and last.isdigit())
        or len(cursor) > 40
    ):
        raise BadInput("cursor is not one this server handed out: start again without it")
    try:
        when = datetime.fromtimestamp(int(at) / 1e6, UTC)
    except (OverflowError, ValueError, OSError):
        raise BadInput("cursor is out of range") from None
    return when, int(last)


def _dead_position(at: datetime, last: int) -> str:
    delta = at - datetime(1970, 1, 1, tzinfo=UTC)
    micros = (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds
    return f"{micros}.{last}"


async def dead_letters_page(
    conn: Conn,
    *,
    endpoint_id: int | None = None,
    limit: int | None = None,
    app: str | None = None,
    cursor: str | None = None,
) -> tuple[list[dict[str, Any]], str | None]:
    """The newest dead letters from `cursor` on, and the cursor of the next
    page (None on the last)."""
    if endpoint_id is not None and app is not None:
        await catalog.check_owner(conn, endpoint_id, app)
    n = _limit(limit if limit is not None else 100)
    rows = await db.dead_letters_page(conn, endpoint_id, n + 1, app, _dead_cursor(cursor))
    more = len(rows) > n
    nxt = _dead_position(rows[n - 1].dead_at, rows[n - 1].id) if more else None
    return [as_dict(r) for r in rows[:n]], nxt
