"""`dlq analyze` reads dead letters counted per five minutes (schema 030),
not each letter of its span: what it reports must equal what the letters
themselves say, at the span's edge, after a replay (before and after
maintenance folds the counts), and for the pattern."""

from __future__ import annotations

import asyncpg

from dispatcher.core.dlq import classify
from dispatcher.core.retention import Retention
from dispatcher.db import catalog, upkeep
from dispatcher.ops import reports
from tests.helpers import add_endpoint
from tests.receivers import Receiver

SPAN_H = 2.0
# Seconds before now each letter died: two past the span, two in its first
# (partial) five minutes, a burst inside, two in the last minute.
AGES = [SPAN_H * 3600 + 40, SPAN_H * 3600 + 15, SPAN_H * 3600 - 15, SPAN_H * 3600 - 40]
AGES += [3000 + 45 * i for i in range(14)] + [20, 5]
EXACT = """
    SELECT count(*) AS dead, min(updated_at) AS first_at, max(updated_at) AS last_at,
           avg(attempt_count)::float8 AS avg_attempts,
           array_agg(extract(epoch FROM updated_at)::float8) AS times,
           array_agg(last_status_code) AS codes
    FROM webhook_queue
    WHERE status = 'dead_letter' AND endpoint_id = $1
      AND updated_at > now() - make_interval(secs => $2)"""


async def _analyzed(conn: asyncpg.Connection, endpoint: int) -> dict:
    rows = [r for r in await reports.dlq_analyze(conn, SPAN_H) if r["endpoint_id"] == endpoint]
    assert len(rows) == 1
    return rows[0]


async def _agrees(conn: asyncpg.Connection, endpoint: int) -> int:
    got = await _analyzed(conn, endpoint)
    exact = await conn.fetchrow(EXACT, endpoint, SPAN_H * 3600)
    assert got["dead"] == exact["dead"]
    assert got["first_at"] == exact["first_at"] and got["last_at"] == exact["last_at"]
    assert got["avg_attempts"] == round(exact["avg_attempts"], 2)
    assert got["pattern"] == classify(exact["times"], exact["codes"]).name
    assert got["primary_status_code"] == 503 and got["primary_error"] == "http_503"
    return int(got["dead"])


async def test_analyze_counts_what_the_letters_say(
    conn: asyncpg.Connection, receiver: Receiver
) -> None:
    endpoint, _ = await add_endpoint(conn, receiver.url("/r"))
    await catalog.enqueue_bulk(conn, [(f"e{i}", "t", "{}", None) for i in range(len(AGES))])
    await conn.execute(
        "SELECT dispatcher_day_partitions('webhook_history_dead', 1, NULL, 86400,"
        " now() - interval '1 day')"
    )
    for i, age in enumerate(AGES):
        # One a statement, each its own attempt count; the 400 is outnumbered.
        await conn.execute(
            "UPDATE webhook_queue SET status = 'dead_letter', attempt_count = $2,"
            " last_status_code = CASE WHEN $2 = 3 THEN 400 ELSE 503 END,"
            " last_error = CASE WHEN $2 = 3 THEN 'http_400' ELSE 'http_503' END,"
            " updated_at = now() - make_interval(secs => $3) WHERE event_id = $1",
            f"e{i}", 1 + i % 5, age,
        )  # fmt: skip
    assert await _agrees(conn, endpoint) == len(AGES) - 2
    assert (await _analyzed(conn, endpoint))["pattern"] == "cluster"
    # Replayed: gone from the analysis at once (its bucket's count is a
    # delta until maintenance folds it), and after the fold.
    replayed = await conn.fetchval(
        "SELECT count(*) FROM dispatcher_revive(ARRAY(SELECT id FROM webhook_history"
        " WHERE event_id IN ('e5', 'e19')), '{dead_letter}', false)"
    )
    assert replayed == 2
    assert await _agrees(conn, endpoint) == len(AGES) - 4
    assert await conn.fetchval("SELECT count(*) FROM dead_letter_deltas") > 0
    await upkeep.maintain(conn, 86400.0, Retention())
    assert await conn.fetchval("SELECT count(*) FROM dead_letter_deltas") == 0
    assert await conn.fetchval("SELECT count(*) FROM dead_letter_buckets WHERE n <= 0") == 0
    assert await _agrees(conn, endpoint) == len(AGES) - 4


async def test_a_truncated_history_takes_its_counts_and_a_stray_count_is_left_out(
    conn: asyncpg.Connection, receiver: Receiver
) -> None:
    endpoint, _ = await add_endpoint(conn, receiver.url("/r"))
    await catalog.enqueue_bulk(conn, [(f"t{i}", "t", "{}", None) for i in range(3)])
    await conn.execute("UPDATE webhook_queue SET status = 'dead_letter'")
    assert (await _analyzed(conn, endpoint))["dead"] == 3
    await conn.execute("TRUNCATE webhook_history")
    assert await conn.fetchval("SELECT count(*) FROM dead_letter_deltas") == 0
    assert await conn.fetchval("SELECT dispatcher_count('dead_letters')") == 0
    assert await reports.dlq_analyze(conn, SPAN_H) == []
    # A count with no letter behind it (a hand edit of history's rows in
    # place): not reported, and the report does not fail.
    await conn.execute(
        "INSERT INTO dead_letter_deltas VALUES ($1, dispatcher_dead_bucket(now()), 500,"
        " 'x', 2, 2)", endpoint
    )  # fmt: skip
    assert await reports.dlq_analyze(conn, SPAN_H) == []
