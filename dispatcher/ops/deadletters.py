"""The operation on dead letters: replay, back to pending with a fresh attempt budget.

By ids, by endpoint (optionally within a time range, a capped number per
call), or every endpoint's (of an application) since a time; with an
application's own credential the requeued deliveries are taken from its
events quota in the same transaction. Callers reach it through
ops.service; this module never runs SQL (the catalog does).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from dispatcher.core.errors import BadInput
from dispatcher.db import Conn, catalog, deliveries
from dispatcher.ops.events import take_event_quota
from dispatcher.ops.inputs import check_id, parse_time

DEFAULT_REPLAY_LIMIT = 10_000  # dead letters requeued per replay call


@dataclass(frozen=True, kw_only=True, slots=True)
class Replayed:
    requeued: int
    limit_reached: bool  # more may be left: call again


async def replay(
    conn: Conn,
    *,
    ids: Sequence[int] | None = None,
    endpoint_id: int | None = None,
    since: str | datetime | None = None,
    until: str | datetime | None = None,
    limit: int | None = None,
    app: str | None = None,
    within_quota: bool = False,
) -> Replayed:
    """Moves dead letters back to pending with a fresh attempt budget: the
    given ids, or an endpoint's (optionally only those that died between
    `since` and `until`, at most `limit` per call), or without an endpoint
    those of every endpoint (of `app`) that died since `since`.

    `within_quota` (an application's own credential): the deliveries it
    requeues are taken from `app`'s max_events_per_s, in the same
    transaction, so that past the quota (Throttled) nothing is requeued. A
    call of more than the bucket holds passes when it is full and leaves it
    in debt, as a large take of events does: the average rate holds."""
    if not within_quota:
        return await _replay(conn, ids, endpoint_id, since, until, limit, app)
    async with conn.transaction():
        done = await _replay(conn, ids, endpoint_id, since, until, limit, app)
        if done.requeued:
            await take_event_quota(conn, app, done.requeued)
    return done


async def _replay(
    conn: Conn,
    ids: Sequence[int] | None,
    endpoint_id: int | None,
    since: str | datetime | None,
    until: str | datetime | None,
    limit: int | None,
    app: str | None,
) -> Replayed:
    if ids is not None and endpoint_id is not None:
        raise BadInput("use either ids or an endpoint, not both")
    if ids is not None:
        if not isinstance(ids, list | tuple):
            raise BadInput("ids must be a list of integer ids")
        for i in ids:
            check_id(i, "each id")
        n = await catalog.replay_ids(conn, list(ids), app)
        return Replayed(requeued=n, limit_reached=False)
    cap = DEFAULT_REPLAY_LIMIT if limit is None else limit
    if isinstance(cap, bool) or not isinstance(cap, int) or cap < 1:
        raise BadInput("limit must be at least 1")
    start, end = parse_time(since, "since"), parse_time(until, "until")
    if endpoint_id is None:
        # "Resend everything that failed since…": every endpoint of the
        # application (the admin: of every application), only with a time,
        # so that no call requeues a whole history by accident.
        if start is None:
            raise BadInput("replay needs ids, an endpoint, or a since time")
        n = await deliveries.replay_since(conn, app, start, end, cap)
        return Replayed(requeued=n, limit_reached=n == cap)
    check_id(endpoint_id, "endpoint")
    await catalog.check_owner(conn, endpoint_id, app)
    n = await catalog.replay_endpoint(conn, endpoint_id, start, end, cap)
    return Replayed(requeued=n, limit_reached=n == cap)
