"""Data access for the worker's hot path: claims, outcomes, breakers, probes
and heartbeats (what maintenance does beside it is upkeep.py's).

Binds named queries (queries.sql) to connections. It never makes delivery
decisions: callers hand it decided values (claim budgets, outcomes, breaker
states) and it persists them.
"""

from __future__ import annotations

import operator
from collections.abc import Sequence
from typing import NamedTuple

import asyncpg

from dispatcher.core.breaker import Breaker, BreakerState, effective_threshold
from dispatcher.core.destinations import open_url
from dispatcher.core.failover import Rewrite
from dispatcher.core.models import Delivery, Endpoint, Outcome, out_of_range
from dispatcher.core.opsevents import OpsEvent
from dispatcher.core.secretbox import PREFIX as SEALED
from dispatcher.core.secretbox import SecretBox, SecretUnreadable, unseal
from dispatcher.db import Conn, Q, opswebhooks
from dispatcher.db.columns import settings_from_row, unseal_headers

REWRITE_TIMEOUT_S = 60.0

# ---------------------------------------------------------------- endpoints


def endpoint_from_row(
    row: asyncpg.Record, old_secrets: Sequence[str] = (), box: SecretBox | None = None
) -> Endpoint:
    settings = settings_from_row(row)
    # Header values are often the receiver's credentials: sealed like secrets.
    settings["headers"] = unseal_headers(box, settings["headers"])
    for name in ("client_cert", "client_key"):
        if settings[name] is not None:
            settings[name] = unseal(box, settings[name])
    return Endpoint(
        id=row["id"],
        url=open_url(box, row["url"]),  # a broker URL's password is sealed
        secrets=tuple(unseal(box, s) for s in (row["secret"], *old_secrets)),
        enabled=row["enabled"],
        app=row["application_id"],
        **settings,
    )


class EndpointState(NamedTuple):
    """One endpoint as the engine's refresh sees it."""

    endpoint: Endpoint
    breaker: Breaker
    probe_owner: str | None
    p95_ms: float | None
    paused_for_s: float
    broken: str | None = None  # why this row cannot be sent to, if it cannot
    ops: bool = False  # an operational webhook (schema 011), not a customer's endpoint
    failure_times: tuple[float, ...] = ()  # the stored run (core.autodisable)


def _decoded(
    r: asyncpg.Record, box: SecretBox | None
) -> tuple[Endpoint, str | None, SecretUnreadable | None]:
    """The row as an Endpoint; or, when it cannot be used (a column that no
    longer decodes, a setting out of range: written by hand, by an older
    version, sealed with another key), a stand-in with default settings
    that carries the reason. One bad row must never stop the refresh of the
    rest, and the reason is ours: never the row's text (its URL, headers)."""
    unreadable = None
    try:
        endpoint = endpoint_from_row(r, r["old_secrets"], box)
        reason = out_of_range(endpoint)
        if reason is None:
            return endpoint, None, None
    except SecretUnreadable as exc:
        reason, unreadable = "secret unreadable (DISPATCHER_SECRET_KEY)", exc
    except Exception as exc:
        reason = f"row unreadable ({type(exc).__name__})"
    # A credential that does not open may be the key's fault, not the row's:
    # its deliveries wait (a disabled stand-in is never claimed) instead of
    # being dead-lettered, until a worker with the right key reads it.
    stand_in = Endpoint(
        id=r["id"], url=str(r["url"]), secrets=(),
        enabled=r["enabled"] is True and unreadable is None, app=str(r["application_id"]),
    )  # fmt: skip
    return stand_in, reason, unreadable


async def engine_endpoints(
    conn: Conn, box: SecretBox | None = None, only: int | None = None
) -> tuple[float, list[EndpointState]]:
    """Every endpoint (or `only` that one) with its stored breaker, for the
    engine's gates; and the DB clock."""
    rows = await conn.fetch(Q["engine_endpoints"], only)
    out = []
    db_now = 0.0
    sealed_opened, sealed_failed, readable = 0, None, 0
    for r in rows:
        db_now = r["db_now"]
        breaker = Breaker(
            state=BreakerState(r["state"] or "closed"),
            consecutive_failures=r["consecutive_failures"] or 0,
            opened_at=r["opened_at"],
            cooldown_s=r["cooldown_seconds"] or r["cooldown_s"],
        )
        endpoint, broken, unreadable = _decoded(r, box)
        if unreadable is not None:
            sealed_failed = sealed_failed or unreadable
        else:
            readable += 1
            sealed_opened += r["secret"].startswith(SEALED)
        out.append(
            EndpointState(
                endpoint,
                breaker,
                r["probe_owner"],
                r["p95_ms"],
                r["paused_for_s"] or 0.0,
                broken,
                r["kind"] == "ops",
                tuple(r["failure_times"] or ()),
            )
        )
    if sealed_failed is not None and not sealed_opened and (box is not None or not readable):
        # This worker's configuration, not a bad row: with a key, not one
        # sealed secret opens (the wrong key); without one, no row at all
        # can be read (the key was forgotten). Without a key, one sealed-
        # looking row among readable ones is that row's problem: it waits.
        raise sealed_failed
    return db_now, out


# ---------------------------------------------------------------- the hot path


async def claim(
    conn: Conn,
    *,
    endpoint_ids: list[int],
    budgets: list[int],
    leases_s: list[float],
    limit: int,
    worker: str,
) -> list[Delivery]:
    rows = await conn.fetch(Q["claim_batch"], endpoint_ids, budgets, leases_s, limit, worker)
    claimed = list(map(Delivery._make, rows))
    if None in map(_BODY, claimed):
        # NULL: erased while the row was on the wire (schema 022).
        claimed = [d if d.body is not None else d._replace(body=b"", erased=True) for d in claimed]
    return claimed


_BODY = operator.attrgetter("body")


# The columns record_outcomes and rewrite_outcomes unnest, in their order,
# and the attempt count at the claim: where they are in an Outcome.
_COLUMNS = tuple(Outcome._fields.index(name) for name in (
    "delivery_id", "endpoint_id", "status", "next_attempt_in_s", "spent_attempt",
    "status_code", "response_ms", "error"))  # fmt: skip
_ATTEMPT = Outcome._fields.index("attempt")


def _outcome_columns(outcomes: Sequence[Outcome]) -> list[Sequence[object]]:
    """Outcomes as the arrays record_outcomes and rewrite_outcomes unnest,
    then the attempt counts. Transposed by zip, in C: a comprehension per
    column ran a line of Python per row and column, a dozen a delivery.
    The statuses go as they are: a StrEnum member is the str of its value."""
    if not outcomes:
        return [()] * (len(_COLUMNS) + 1)
    fields = list(zip(*outcomes, strict=True))
    return [fields[i] for i in (*_COLUMNS, _ATTEMPT)]


async def record_outcomes(conn: Conn, outcomes: Sequence[Outcome], worker: str) -> list[float]:
    """Persists outcomes; returns the end-to-end lag (s) of each row delivered."""
    *columns, attempts = _outcome_columns(outcomes)
    lags: list[float] = await conn.fetchval(
        Q["record_outcomes"], *columns, worker, attempts,
        # The records as JSON text (jsonb's binary form would be built here).
        [None if o.detail is None else o.detail.decode() for o in outcomes],
    )  # fmt: skip
    return lags


async def server_identity(conn: Conn) -> str:
    """Which server this connection reached (core.failover): another
    value after a promotion or a restart."""
    identity: str = await conn.fetchval(Q["server_identity"])
    return identity


async def rewrite_outcomes(conn: Conn, rewrites: Sequence[Rewrite], worker: str) -> dict[int, int]:
    """Writes again outcomes another server acknowledged, where this one
    lacks them; returns the rows changed with their attempt count before."""
    outcomes = [r.outcome for r in rewrites]
    rows = await conn.fetch(
        Q["rewrite_outcomes"],
        *_outcome_columns(outcomes),
        [r.ago_s for r in rewrites],
        worker,
        # Up to core.failover.KEEP_MAX rows at once, once per failover: more
        # than the pool's 5 s for a hot-path statement.
        timeout=REWRITE_TIMEOUT_S,
    )
    return {r["id"]: r["before"] for r in rows}


class StoredBreaker(NamedTuple):
    """A locked breaker row and what its fold needs."""

    breaker: Breaker
    threshold: int  # effective: lowered for slow endpoints
    base_cooldown_s: float
    failure_times: tuple[float, ...] = ()  # core.autodisable's run
    disable_after: int | None = None
    disable_within_s: float | None = None


async def lock_breakers(
    conn: Conn, endpoint_ids: list[int]
) -> tuple[float, dict[int, StoredBreaker]]:
    """Locks the breakers of these endpoints; returns the database clock with them."""
    rows = await conn.fetch(Q["lock_health"], endpoint_ids)
    db_now = rows[0]["db_now"] if rows else 0.0
    return db_now, {
        r["endpoint_id"]: StoredBreaker(
            Breaker(
                state=BreakerState(r["state"]),
                consecutive_failures=r["consecutive_failures"],
                opened_at=r["opened_at"],
                cooldown_s=r["cooldown_seconds"],
                last_failure_at=r["last_failure_at"],
                last_success_at=r["last_success_at"],
            ),
            effective_threshold(r["failure_threshold"], r["p95_ms"]),
            r["cooldown_s"],
            tuple(r["failure_times"]),
            r["disable_after"],
            r["disable_within_s"],
        )
        for r in rows
    }


async def store_breakers(
    conn: Conn,
    breakers: dict[int, tuple[Breaker, int]],
    failure_times: dict[int, tuple[float, ...]] | None = None,
) -> None:
    """`failure_times`: each endpoint's autodisable run (absent: none)."""
    ids = list(breakers)
    runs = failure_times or {}
    await conn.execute(
        Q["store_health"],
        ids,
        [breakers[i][0].state.value for i in ids],
        [breakers[i][0].consecutive_failures for i in ids],
        [breakers[i][0].opened_at for i in ids],
        [breakers[i][0].cooldown_s for i in ids],
        [breakers[i][1] for i in ids],
        [breakers[i][0].last_failure_at for i in ids],
        [breakers[i][0].last_success_at for i in ids],
        ["{" + ",".join(map(repr, runs.get(i, ()))) + "}" for i in ids],
    )


async def record_transitions(conn: Conn, transitions: list[tuple[int, str, str, float]]) -> None:
    if transitions:
        cols = list(zip(*transitions, strict=True))
        await conn.execute(Q["record_transitions"], *[list(c) for c in cols])


async def disable_gone(conn: Conn, endpoint_ids: list[int]) -> list[int]:
    """Disables these endpoints; returns those that were enabled until now."""
    return [r[0] for r in await conn.fetch(Q["disable_gone"], endpoint_ids)]


async def ops_emit(conn: Conn, events: list[OpsEvent]) -> None:
    """Operational events of a flush, queued in its transaction (one statement)."""
    await opswebhooks.emit(conn, events)


async def disable_auto(conn: Conn, endpoint_ids: list[int]) -> list[tuple[int, str]]:
    """Disables these endpoints (reason `auto`); returns those it disabled
    now, with their application."""
    rows = await conn.fetch(Q["disable_auto"], endpoint_ids)
    return [(r["id"], r["application_id"]) for r in rows]


async def begin_probe(conn: Conn, endpoint_id: int, worker: str, stale_after_s: float) -> bool:
    return await conn.fetchval(Q["begin_probe"], endpoint_id, worker, stale_after_s) is not None


# ---------------------------------------------------------------- the idle probe


async def newest_id(conn: Conn) -> int:
    n: int = await conn.fetchval(Q["newest_id"])
    return n


async def probe_new_rows(conn: Conn, above: int) -> tuple[tuple[int, str], int]:
    """(the signature of the live rows with an id above `above`: their count
    and a hash sum, which changes whenever that set does; the highest such
    id or `above`)."""
    row = await conn.fetchrow(Q["probe_new_rows"], above)
    assert row is not None
    return (int(row["n"]), row["sig"]), int(row["top"])


# ---------------------------------------------------------------- workers


async def heartbeat(
    conn: Conn,
    worker: str,
    host: str,
    pid: int,
    live_s: float,
    *,
    in_flight: int = 0,
    outcomes_waiting: int = 0,
    applied: Sequence[str] | None = None,
) -> dict[str, tuple[str, ...] | None]:
    """Says this worker is alive, what it holds and the membership whose
    shares it keeps to (None: none yet); returns every other live worker
    with the membership it has applied."""
    rows = await conn.fetch(
        Q["heartbeat"], worker, host, pid, live_s, in_flight, outcomes_waiting,
        None if applied is None else list(applied),
    )  # fmt: skip
    return {r[0]: None if r[1] is None else tuple(r[1]) for r in rows}


async def leave(conn: Conn, worker: str) -> None:
    await conn.execute(Q["leave"], worker)


async def pause_endpoints(conn: Conn, pauses: dict[int, float]) -> None:
    ids = sorted(pauses)
    await conn.execute(Q["pause_endpoints"], ids, [pauses[i] for i in ids])
