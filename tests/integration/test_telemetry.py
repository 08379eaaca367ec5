"""Percentiles, retention, dead-letter analysis and replay on crafted histories."""

from __future__ import annotations

import asyncio
import random
from datetime import UTC, datetime, timedelta

import asyncpg

from dispatcher.db import catalog, upkeep
from dispatcher.ops import reports
from dispatcher.settings import Retention
from tests.helpers import add_endpoint, cli, drain
from tests.receivers import Receiver

WINDOW = 24 * 3600.0


def _exact(values: list[int], q: float) -> float:
    """percentile_cont by hand: linear interpolation between closest ranks."""
    xs = sorted(values)
    pos = q * (len(xs) - 1)
    lo = int(pos)
    hi = min(lo + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (pos - lo)


async def test_percentiles_match_exact_values(conn: asyncpg.Connection) -> None:
    a, _ = await add_endpoint(conn, "https://example.com/a")
    b, _ = await add_endpoint(conn, "https://example.com/b")
    rng = random.Random(7)
    samples = {
        a: [rng.randint(1, 5000) for _ in range(997)],
        b: [rng.randint(1, 50) for _ in range(23)],
    }
    for eid, values in samples.items():
        await conn.executemany(
            "INSERT INTO endpoint_latency (endpoint_id, response_ms, status_code)"
            " VALUES ($1, $2, 200)",
            [(eid, v) for v in values],
        )
    # Old samples outside the window must not count.
    await conn.execute(
        "INSERT INTO endpoint_latency (endpoint_id, response_ms, measured_at)"
        " SELECT $1, 999999, now() - interval '25 hours' FROM generate_series(1, 50)",
        a,
    )
    rows = {r["endpoint_id"]: r for r in await reports.endpoint_health(conn, WINDOW)}
    for eid, values in samples.items():
        r = rows[eid]
        assert r["sample_count"] == len(values)
        for q, key in ((0.5, "p50_ms"), (0.95, "p95_ms"), (0.99, "p99_ms")):
            # From the per-minute histograms (schema 020): within 2 % (SPEC).
            assert abs(r[key] - _exact(values, q)) <= 0.02 * _exact(values, q), (eid, key)


async def test_slow_command(db_url: str, conn: asyncpg.Connection) -> None:
    slow, _ = await add_endpoint(conn, "https://example.com/slow")
    few, _ = await add_endpoint(conn, "https://example.com/few")
    fast, _ = await add_endpoint(conn, "https://example.com/fast")
    for eid, ms, n in ((slow, 3000, 30), (few, 9000, 5), (fast, 20, 40)):
        await conn.execute(
            "INSERT INTO endpoint_latency (endpoint_id, response_ms)"
            " SELECT $1, $2 FROM generate_series(1, $3)",
            eid, ms, n,
        )  # fmt: skip
    code, out, _ = await cli(db_url, "slow", "--json")
    import json

    assert code == 0
    assert [r["endpoint_id"] for r in json.loads(out)] == [slow]
    code, out, _ = await cli(db_url, "slow", "--p95-ms", "10", "--json")
    assert sorted(r["endpoint_id"] for r in json.loads(out)) == [slow, fast]


async def _dead(conn: asyncpg.Connection, eid: int, when: list[datetime], code: int | None,
                error: str = "HTTP 500", attempts: int = 5) -> None:  # fmt: skip
    await conn.executemany(
        "INSERT INTO webhook_queue (endpoint_id, event_id, event_type, payload, status,"
        " attempt_count, updated_at, created_at, last_status_code, last_error)"
        " VALUES ($1, $2, 't', '{}', 'dead_letter', $3, $4, $4, $5, $6)",
        [(eid, f"d{eid}-{i}", attempts, t, code, error) for i, t in enumerate(when)],
    )


async def test_dead_letter_patterns(conn: asyncpg.Connection) -> None:
    now = datetime.now(UTC)
    down, _ = await add_endpoint(conn, "https://example.com/down")
    creds, _ = await add_endpoint(conn, "https://example.com/creds")
    throttled, _ = await add_endpoint(conn, "https://example.com/throttled")
    trickle, _ = await add_endpoint(conn, "https://example.com/trickle")
    await _dead(conn, down, [now - timedelta(hours=3, minutes=i) for i in range(40)], None,
                "timeout after 15000 ms")  # fmt: skip
    await _dead(
        conn, creds, [now - timedelta(minutes=5 * i) for i in range(12)], 401, "HTTP 401", 1
    )
    await _dead(conn, throttled, [now - timedelta(minutes=i) for i in range(8)], 429, "HTTP 429")
    await _dead(conn, trickle, [now - timedelta(hours=3 * i, minutes=1) for i in range(7)], 500)
    got = {r["endpoint_id"]: r for r in await reports.dlq_analyze(conn, 24)}
    assert got[down]["pattern"] == "cluster" and got[down]["dead"] == 40
    assert got[down]["primary_error"] == "timeout after 15000 ms"
    assert got[down]["primary_status_code"] is None
    assert got[creds]["pattern"] == "status-code" and got[creds]["primary_status_code"] == 401
    assert "credentials" in got[creds]["suggested_action"] and got[creds]["avg_attempts"] == 1.0
    assert got[throttled]["pattern"] == "status-code"
    assert "rate_per_s" in got[throttled]["suggested_action"]
    assert got[trickle]["pattern"] == "gradual"
    assert "max_attempts" in got[trickle]["suggested_action"]
    assert got[trickle]["first_at"] < got[trickle]["last_at"]
    # The window: only the last two hours leaves the old cluster out.
    recent = {r["endpoint_id"] for r in await reports.dlq_analyze(conn, 2)}
    assert down not in recent and creds in recent


async def test_replay_by_each_selector(db_url: str, conn: asyncpg.Connection) -> None:
    import json

    now = datetime.now(UTC)
    a, _ = await add_endpoint(conn, "https://example.com/a")
    b, _ = await add_endpoint(conn, "https://example.com/b")
    await _dead(conn, a, [now - timedelta(hours=h) for h in (1, 2, 3, 4, 5)], 500)
    await _dead(conn, b, [now - timedelta(hours=1)] * 3, 500)
    ids = [r["id"] for r in await conn.fetch(
        "SELECT id FROM webhook_queue WHERE endpoint_id=$1 ORDER BY id", b)]  # fmt: skip
    code, out, _ = await cli(db_url, "dlq", "replay", "--id", str(ids[0]), str(ids[1]), "--json")
    assert json.loads(out) == {"requeued": 2}
    since = (now - timedelta(hours=2, minutes=30)).isoformat()
    until = (now - timedelta(hours=1, minutes=30)).isoformat()
    code, out, _ = await cli(db_url, "dlq", "replay", "--endpoint", str(a), "--since", since,
                             "--until", until, "--json")  # fmt: skip
    assert json.loads(out) == {"requeued": 1}
    code, out, err = await cli(db_url, "dlq", "replay", "--endpoint", str(a), "--limit", "2",
                               "--json")  # fmt: skip
    assert json.loads(out) == {"requeued": 2} and "cap" in err
    code, out, _ = await cli(db_url, "dlq", "replay", "--endpoint", str(a), "--json")
    assert json.loads(out) == {"requeued": 2}
    rows = await conn.fetch(
        "SELECT status, attempt_count FROM webhook_queue WHERE status='pending'"
    )
    assert len(rows) == 7 and all(r["attempt_count"] == 0 for r in rows)
    code, out, err = await cli(db_url, "dlq", "replay", "--endpoint", "999")
    assert code == 2


async def test_retention_under_concurrent_claiming(
    db_url: str, conn: asyncpg.Connection, receiver: Receiver
) -> None:
    eid, _ = await add_endpoint(conn, receiver.url("/ok"))
    await conn.execute(
        "INSERT INTO webhook_queue (endpoint_id, event_id, event_type, payload, status,"
        " delivered_at, attempt_count)"
        " SELECT $1, 'old' || g, 't', '{}', 'delivered', now() - interval '10 days', 1"
        " FROM generate_series(1, 25000) g", eid,
    )  # fmt: skip
    await catalog.enqueue_bulk(conn, [(f"new{i}", "t", "{}", None) for i in range(500)])

    await conn.execute(
        "INSERT INTO webhook_queue (endpoint_id, event_id, event_type, payload, status,"
        " updated_at, created_at, attempt_count)"
        " SELECT $1, 'dead' || g, 't', '{}', 'dead_letter', now() - interval '10 days',"
        " now() - interval '10 days', 5 FROM generate_series(1, 50) g", eid,
    )  # fmt: skip

    async def prune() -> None:
        c = await asyncpg.connect(db_url)
        try:
            while await c.fetchval("SELECT count(*) FROM webhook_queue WHERE event_id LIKE 'old%'"):
                await upkeep.maintain(c, WINDOW, Retention(), batch=2000, max_batches=3)
                await asyncio.sleep(0)
        finally:
            await c.close()

    await asyncio.wait_for(asyncio.gather(prune(), drain(db_url)), 60)
    counts = dict(await conn.fetch("SELECT status, count(*) FROM webhook_queue GROUP BY status"))
    # Dead letters are kept longer (30 days): these 10-day-old ones stay.
    assert counts == {"delivered": 500, "dead_letter": 50}
    assert len(receiver.received) == 500
