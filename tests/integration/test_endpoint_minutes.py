"""Percentiles and last-hour figures from bounded aggregates (issue 31,
SPEC "History, payloads and retention"): the outcome write counts each
attempt into its endpoint's minute (schema 020), the refresh merges at most
the window's minutes, and the figures agree with the exact ones."""

from __future__ import annotations

import random
from datetime import timedelta

import asyncpg

from dispatcher import db
from dispatcher.core.models import Outcome, Status
from dispatcher.db import catalog, latency, store, upkeep
from tests.helpers import add_endpoint

ME = "w-me"
WINDOW_S = 24 * 3600.0


async def _claimed(conn: asyncpg.Connection, n: int, endpoint_id: int) -> list[int]:
    """n rows of the endpoint, held by this worker as a claim leaves them."""
    rows = [(f"e{endpoint_id}-{i}", f"t{endpoint_id}", "{}", None) for i in range(n)]
    await catalog.enqueue_bulk(conn, rows)
    ids = [
        r["id"]
        for r in await conn.fetch(
            "UPDATE webhook_queue SET status = 'in_flight', locked_by = $1"
            " WHERE endpoint_id = $2 AND status = 'pending' RETURNING id",
            ME,
            endpoint_id,
        )
    ]
    return sorted(ids)


async def _ep(conn: asyncpg.Connection, path: str) -> int:
    """An endpoint of its own event type (`_claimed` feeds it alone)."""
    ep: int = (await add_endpoint(conn, f"http://127.0.0.1:9{path}", event_types=(path,)))[0]
    await conn.execute("UPDATE endpoints SET event_types = ARRAY['t' || id] WHERE id = $1", ep)
    return ep


def _out(i: int, ep: int, status: Status, code: int, ms: int) -> Outcome:
    return Outcome(i, ep, status, 5.0, True, code, ms, None, False, None, 0)


async def _record(conn: asyncpg.Connection, outcomes: list[Outcome]) -> None:
    # As the recorder flushes: a few hundred outcomes a statement.
    for k in range(0, len(outcomes), 300):
        await store.record_outcomes(conn, outcomes[k : k + 300], ME)


async def _exact(conn: asyncpg.Connection, ep: int) -> tuple[float, float, float]:
    row = await conn.fetchrow(
        "SELECT percentile_cont(0.5) WITHIN GROUP (ORDER BY response_ms),"
        " percentile_cont(0.95) WITHIN GROUP (ORDER BY response_ms),"
        " percentile_cont(0.99) WITHIN GROUP (ORDER BY response_ms)"
        " FROM endpoint_latency WHERE endpoint_id = $1",
        ep,
    )
    assert row is not None
    return row[0], row[1], row[2]


async def _stored(conn: asyncpg.Connection, ep: int) -> asyncpg.Record:
    row = await conn.fetchrow(
        "SELECT p50_ms, p95_ms, p99_ms, sample_count, attempts_last_hour, successes_last_hour"
        " FROM endpoint_health WHERE endpoint_id = $1",
        ep,
    )
    assert row is not None
    return row


async def test_percentiles_from_minutes_are_within_two_percent(conn: asyncpg.Connection) -> None:
    rnd = random.Random(31)
    shapes = {  # a fast endpoint, a slow one with a tail, one of few samples
        await _ep(conn, "/a"): (3000, lambda: rnd.lognormvariate(3.5, 0.6)),
        await _ep(conn, "/b"): (3000, lambda: rnd.paretovariate(1.5) * 400),
        await _ep(conn, "/c"): (40, lambda: rnd.uniform(150, 2500)),
    }  # fmt: skip
    for ep, (n, draw) in shapes.items():
        ids = await _claimed(conn, n, ep)
        outs = []
        for i in ids:
            code = 200 if rnd.random() < 0.9 else 500
            status = Status.DELIVERED if code == 200 else Status.FAILED
            outs.append(_out(i, ep, status, code, max(1, int(draw()))))
        await _record(conn, outs)
    await latency.refresh_percentiles(conn, WINDOW_S)
    for ep, (n, _) in shapes.items():
        exact = await _exact(conn, ep)
        got = await _stored(conn, ep)
        assert got["sample_count"] == n
        for want, have in zip(exact, (got["p50_ms"], got["p95_ms"], got["p99_ms"]), strict=True):
            assert abs(have - want) <= 0.02 * want, (ep, exact, tuple(got))
        ok = await conn.fetchval(
            "SELECT count(*) FROM endpoint_latency WHERE endpoint_id = $1 AND status_code = 200", ep
        )
        assert (got["attempts_last_hour"], got["successes_last_hour"]) == (n, ok)


async def test_the_refresh_reads_minutes_not_samples(conn: asyncpg.Connection) -> None:
    """The raw samples can go (they are the attempt log's) and the figures
    stay; minutes older than the window count for nothing."""
    ep = await _ep(conn, "/a")
    ids = await _claimed(conn, 50, ep)
    await _record(conn, [_out(i, ep, Status.DELIVERED, 200, 100 + k) for k, i in enumerate(ids)])
    await conn.execute("DELETE FROM endpoint_latency")
    await latency.refresh_percentiles(conn, WINDOW_S)
    got = await _stored(conn, ep)
    assert got["sample_count"] == 50 and abs(got["p50_ms"] - 124.5) <= 0.02 * 124.5
    # The same minutes, a day and more ago: outside the window.
    await conn.execute("UPDATE endpoint_minutes SET minute = minute - interval '25 hours'")
    await latency.refresh_percentiles(conn, WINDOW_S)
    got = await _stored(conn, ep)
    assert got["sample_count"] == 0 and got["p95_ms"] is None and got["attempts_last_hour"] == 0


async def test_health_last_hour_from_minutes(conn: asyncpg.Connection) -> None:
    ep = await _ep(conn, "/a")
    ids = await _claimed(conn, 6, ep)
    await _record(conn, [
        _out(ids[0], ep, Status.DELIVERED, 200, 100),
        _out(ids[1], ep, Status.DELIVERED, 200, 300),
        _out(ids[2], ep, Status.DEAD_LETTER, 500, 50),
        _out(ids[3], ep, Status.FAILED, 500, 50),
    ])  # fmt: skip
    summary = await catalog.health_summary(conn)
    assert summary.delivered_last_hour == 2
    assert summary.failed_last_hour == 2  # one retrying, one dead
    assert summary.avg_delivery_ms_last_hour == 200.0
    alerts = await catalog.alert_inputs(conn)
    assert (alerts.dead_last_hour, alerts.dead_prev_hour) == (1, 0)
    # An hour on: the same outcomes are the hour before's.
    await conn.execute("UPDATE endpoint_minutes SET minute = minute - interval '61 minutes'")
    await conn.execute("UPDATE webhook_queue SET updated_at = updated_at - interval '61 minutes'")
    summary = await catalog.health_summary(conn)
    assert (summary.delivered_last_hour, summary.failed_last_hour) == (0, 0)
    assert summary.avg_delivery_ms_last_hour is None
    alerts = await catalog.alert_inputs(conn)
    assert (alerts.dead_last_hour, alerts.dead_prev_hour) == (0, 1)


async def test_maintenance_prunes_minutes_past_the_window(conn: asyncpg.Connection) -> None:
    ep = await _ep(conn, "/a")
    ids = await _claimed(conn, 2, ep)
    await _record(conn, [_out(i, ep, Status.DELIVERED, 200, 10) for i in ids])
    await conn.execute(
        "INSERT INTO endpoint_minutes (endpoint_id, minute, attempts)"
        " VALUES ($1, date_trunc('minute', now()) - interval '25 hours', 9)",
        ep,
    )
    assert await conn.fetchval("SELECT count(*) FROM endpoint_minutes") == 2
    await upkeep.maintain(conn, WINDOW_S)
    assert await conn.fetchval("SELECT sum(attempts) FROM endpoint_minutes") == 2


async def test_outcomes_in_one_flush_fold_into_one_row_per_minute(
    conn: asyncpg.Connection,
) -> None:
    """Two flushes of one endpoint in one minute: one row, counts added and
    the histograms merged bucket by bucket."""
    ep = await _ep(conn, "/a")
    ids = await _claimed(conn, 4, ep)
    first = [
        _out(ids[0], ep, Status.DELIVERED, 200, 40),
        _out(ids[1], ep, Status.DELIVERED, 200, 500),
    ]
    second = [_out(ids[2], ep, Status.DELIVERED, 200, 40), _out(ids[3], ep, Status.FAILED, 503, 7)]
    await store.record_outcomes(conn, first, ME)
    await store.record_outcomes(conn, second, ME)
    rows = await conn.fetch(
        "SELECT attempts, answered_2xx, delivered, delivered_ms, hist_b, hist_n"
        " FROM endpoint_minutes WHERE endpoint_id = $1",
        ep,
    )
    if len(rows) == 2:  # the flushes straddled a minute's turn: add them up
        merged = {}
        for r in rows:
            for b, n in zip(r["hist_b"], r["hist_n"], strict=True):
                merged[b] = merged.get(b, 0) + n
        assert sum(r["attempts"] for r in rows) == 4 and merged[40] == 2
        return
    (r,) = rows
    assert (r["attempts"], r["answered_2xx"], r["delivered"], r["delivered_ms"]) == (4, 3, 3, 580)
    assert list(r["hist_b"]) == sorted(r["hist_b"])
    assert dict(zip(r["hist_b"], r["hist_n"], strict=True))[40] == 2
    assert sum(r["hist_n"]) == 4


async def test_hours_rolled_up_give_the_same_figures(conn: asyncpg.Connection) -> None:
    """Minutes of whole hours read through their hour's row: the same
    counts and percentiles as from the minutes themselves, the window's
    first hour still cut to the minute."""
    ep = await _ep(conn, "/a")
    rnd = random.Random(7)
    ids = await _claimed(conn, 900, ep)
    for k, ago in enumerate(("5 hours", "23 hours 50 minutes", "24 hours 20 minutes", "0")):
        part = ids[k * 225 : (k + 1) * 225]
        outs = [_out(i, ep, Status.DELIVERED, 200, int(rnd.uniform(20, 3000))) for i in part]
        await _record(conn, outs)
        await conn.execute(
            "UPDATE endpoint_minutes SET minute = minute - $1::text::interval"
            " WHERE minute > now() - interval '10 minutes' AND endpoint_id = $2",
            ago, ep,
        )  # fmt: skip
    await latency.refresh_percentiles(conn, WINDOW_S)
    before = tuple(await _stored(conn, ep))
    assert before[3] == 675  # the batch from 24 h 20 min ago is outside the window
    whole = await conn.fetchval(
        "SELECT count(DISTINCT date_trunc('hour', minute)) FROM endpoint_minutes"
        " WHERE minute < date_trunc('hour', now() - interval '5 minutes')"
    )
    await conn.execute(db.Q["roll_up_hours"])
    assert await conn.fetchval("SELECT count(*) FROM endpoint_hours") == whole >= 2
    await latency.refresh_percentiles(conn, WINDOW_S)
    assert tuple(await _stored(conn, ep)) == before
    assert await conn.fetchval("SELECT sum(attempts) FROM endpoint_hours") == 675


async def _attempts(conn: asyncpg.Connection, ep: int, n: int, span: str, seed: int) -> None:
    """n attempts spread over the last `span`, back-dated, as an import
    into the attempt log writes them (its trigger counts their minutes)."""
    await conn.execute(
        "INSERT INTO endpoint_latency (endpoint_id, response_ms, status_code, measured_at)"
        " SELECT $1, (20 + (hashint4(g + $3) & 4095))::int, 200,"
        "        now() - random() * $4::text::interval"
        " FROM generate_series(1, $2) g",
        ep, n, seed, span,
    )  # fmt: skip


async def test_the_running_window_moves_as_a_merge_from_scratch_would(
    conn: asyncpg.Connection,
) -> None:
    """Schema 028: the window's settled part is merged once, then moved
    forward by the minutes that settle and those that leave it. Time is
    moved on by moving the minutes and the window's bounds back by the same
    step: after each step the figures are those of a merge from scratch.
    Half way, the window is merged from rolled-up hours, which are then
    removed (they are copies of their minutes), so that the minutes leaving
    it are taken out of hours."""
    window_s = 3 * 3600.0
    eps = [await _ep(conn, "/a"), await _ep(conn, "/b")]
    for k, ep in enumerate(eps):
        await _attempts(conn, ep, 3000, "4 hours", k)
    await latency.refresh_percentiles(conn, window_s)
    counts = []
    for step in (7, 13, None, 25, 30):
        if step is None:
            await conn.execute(db.Q["roll_up_hours"])
            assert await conn.fetchval("SELECT count(*) FROM endpoint_hours") >= 4
            await conn.execute("UPDATE endpoint_window_state SET built_at = NULL")
            await latency.refresh_percentiles(conn, window_s)
            await conn.execute("DELETE FROM endpoint_hours")
            continue
        # Out and back in: an UPDATE of the keys would meet its own rows.
        await conn.execute(
            "CREATE TEMP TABLE moving AS SELECT * FROM endpoint_minutes;"
            " DELETE FROM endpoint_minutes;"
            f" UPDATE moving SET minute = minute - interval '{step} minutes';"
            " INSERT INTO endpoint_minutes SELECT * FROM moving; DROP TABLE moving"
        )
        await conn.execute(
            "UPDATE endpoint_window_state SET lo = lo - $1::interval, hi = hi - $1::interval",
            timedelta(minutes=step),
        )
        built = await conn.fetchval("SELECT built_at FROM endpoint_window_state")
        await latency.refresh_percentiles(conn, window_s)
        # Moved, not merged again.
        assert await conn.fetchval("SELECT built_at FROM endpoint_window_state") == built
        moved = [tuple(await _stored(conn, ep)) for ep in eps]
        await conn.execute("UPDATE endpoint_window_state SET built_at = NULL")
        await latency.refresh_percentiles(conn, window_s)
        assert [tuple(await _stored(conn, ep)) for ep in eps] == moved, step
        counts.append(moved[0][3])
    assert counts == sorted(counts, reverse=True) and counts[-1] < counts[0]  # minutes left


async def test_a_minute_written_again_is_merged_anew(conn: asyncpg.Connection) -> None:
    """An attempt counted into a minute the running window already holds
    (a rewrite after a failover, an import) is in the next refresh."""
    ep = await _ep(conn, "/a")
    await _attempts(conn, ep, 500, "3 hours", 1)
    await latency.refresh_percentiles(conn, WINDOW_S)
    assert (await _stored(conn, ep))["sample_count"] == 500
    await _attempts(conn, ep, 40, "90 minutes", 2)  # settled minutes, written late
    assert await conn.fetchval("SELECT count(*) FROM endpoint_window_late") == 1
    await latency.refresh_percentiles(conn, WINDOW_S)
    got = await _stored(conn, ep)
    assert got["sample_count"] == 540
    assert await conn.fetchval("SELECT count(*) FROM endpoint_window_late") == 0
    exact = await _exact(conn, ep)
    for want, have in zip(exact, (got["p50_ms"], got["p95_ms"], got["p99_ms"]), strict=True):
        assert abs(have - want) <= 0.02 * want
