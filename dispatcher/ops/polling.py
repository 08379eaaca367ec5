"""Polling endpoints (SPEC "Destinations"): a consumer behind a firewall
reads its endpoint's deliveries in order with a cursor, and coming back
with the cursor acknowledges what it read (those deliveries become
`delivered`).

The cursor is `<last id>_<cutoff in µs>`: the page showed every pending
row due by its cutoff up to the last id, so exactly those are
acknowledged; a row scheduled later, or committed later with a lower id,
stays pending and comes in a later page. The cutoff is the read's time
when no other transaction was writing the live queue (then nothing can
still commit below the ids seen: a row is readable as soon as it is
committed), else that time less POLL_MARGIN_S. (A cursor from before,
`<last id>.<read time in µs>`, is read as its read time less the margin,
what its page used.) A page stops early past PAGE_BYTES of payloads. The
web layer repeats `read` for a long poll (`wait_s`), on a pooled
connection each time.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import orjson

from dispatcher.core.destinations import POLL, kind_of
from dispatcher.core.errors import BadInput, UnknownEndpoint
from dispatcher.db import Conn, catalog, polling

EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
MICROSECOND = timedelta(microseconds=1)
DEFAULT_LIMIT = 50
MAX_LIMIT = 1000  # SPEC "Limits": list routes cap `limit` at 1000
MAX_WAIT_S = 30.0
# While other transactions write the live queue, a row is shown once it
# has been due this long: a producer's transaction that commits within it
# of its INSERT is seen in id order (the prober's watermark makes the same
# bet, worker/prober.py).
POLL_MARGIN_S = 1.0
# A page's payloads (up to 256 KiB each) stop adding rows past this many
# bytes (one row always): a thousand of them is not one answer.
PAGE_BYTES = 8 * 1024 * 1024


def parse_cursor(value: str | None) -> tuple[int, datetime] | None:
    """(last id, cutoff) of a cursor this route returned; None for none."""
    if value is None or value == "":
        return None
    old = "_" not in value  # `<id>.<read time>`, before the cutoff was kept
    head, _, tail = value.partition("." if old else "_")
    if not (head.isascii() and head.isdigit() and tail.isascii() and tail.isdigit()):
        raise BadInput("cursor is not one this route returned")
    if len(head) > 19 or len(tail) > 19:
        raise BadInput("cursor is not one this route returned")
    try:
        at = EPOCH + int(tail) * MICROSECOND
    except OverflowError:
        raise BadInput("cursor is not one this route returned") from None
    return int(head), at - timedelta(seconds=POLL_MARGIN_S) if old else at


def make_cursor(last_id: int, cutoff: datetime) -> str:
    return f"{last_id}_{(cutoff - EPOCH) // MICROSECOND}"  # exact: no float on the way


def check_limit(text: str | None) -> int:
    """`?limit=` as given, capped at MAX_LIMIT as every list route caps it;
    DEFAULT_LIMIT when absent."""
    if text is None:
        return DEFAULT_LIMIT
    digits = text.lstrip("0") if text.isascii() and text.isdigit() else ""
    if not digits:
        raise BadInput(f"limit must be a whole number from 1 to {MAX_LIMIT}")
    return MAX_LIMIT if len(digits) > 4 else min(int(digits), MAX_LIMIT)


def check_wait(text: str | None) -> float:
    """`?wait_s=` as given: seconds to wait for a delivery, 0..MAX_WAIT_S."""
    if text is None:
        return 0.0
    try:
        value = float(text) if text.isascii() else float("nan")
    except ValueError:
        value = float("nan")
    if not 0 <= value <= MAX_WAIT_S:  # NaN too
        raise BadInput(f"wait_s must be a number of seconds from 0 to {MAX_WAIT_S:g}")
    return value


async def check_polled(conn: Conn, endpoint_id: int, app: str | None) -> None:
    """UnknownEndpoint for another application's endpoint (as for one that
    does not exist); BadInput when it is not a polling endpoint."""
    await catalog.check_owner(conn, endpoint_id, app)
    url = await polling.endpoint_url(conn, endpoint_id)
    if url is None:
        raise UnknownEndpoint(f"no endpoint with id {endpoint_id}")
    if kind_of(url) != POLL:
        raise BadInput(f"endpoint {endpoint_id} is not a polling endpoint (its url is not poll:)")


async def read(
    conn: Conn, endpoint_id: int, cursor: tuple[int, datetime] | None, given: str | None,
    limit: int,
) -> dict[str, Any]:  # fmt: skip
    """Acknowledges what `cursor` covers, then the next page: `{"data",
    "cursor", "done"}`; an empty page keeps the cursor it was given."""
    async with conn.transaction():
        if cursor is not None:
            await polling.acknowledge(conn, endpoint_id, cursor[0], cursor[1])
        rows = await polling.page(conn, endpoint_id, limit + 1, POLL_MARGIN_S, PAGE_BYTES)
    shown = rows[:limit]
    done = not rows or (len(rows) == rows[0]["total"] and len(rows) <= limit)
    data = [
        {
            "id": r["id"],
            "event_id": r["event_id"],
            "event_type": r["event_type"],
            "timestamp": r["created_at"],
            # As enqueued; null when the payload was erased.
            "payload": None if r["payload"] is None else orjson.Fragment(r["payload"]),
        }
        for r in shown
    ]
    nxt = make_cursor(shown[-1]["id"], shown[-1]["cutoff"]) if shown else given
    return {"data": data, "cursor": nxt, "done": done}
