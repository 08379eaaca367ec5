"""The delivery pipeline against a real PostgreSQL and real receivers."""

from __future__ import annotations

import asyncio
import time

import asyncpg
import orjson
import pytest
from aiohttp import web
from standardwebhooks import Webhook

from dispatcher import enqueue
from dispatcher.metrics import Metrics
from dispatcher.worker.engine import Engine
from tests.helpers import FAST, add_endpoint, drain, statuses
from tests.receivers import Receiver, hang, sequence, status


async def test_signed_delivery_exact_bytes(conn: asyncpg.Connection, db_url: str,
                                           receiver: Receiver) -> None:  # fmt: skip
    eid, secret = await add_endpoint(conn, receiver.url("/ok"), retry_base_ms=0)
    body = '{"b": 2,   "a": [1, 2.50], "click_id": "c-1"}'
    ids = await enqueue(conn, "conversion", body, "evt_1")
    assert len(ids) == 1
    await drain(db_url)
    [got] = receiver.requests_to("/ok")
    assert got.body == body.encode()
    h = {k.lower(): v for k, v in got.headers.items()}
    assert h["webhook-id"] == "evt_1"
    assert h["content-type"] == "application/json"
    assert h["user-agent"].startswith("dispatcher/")
    assert abs(int(h["webhook-timestamp"]) - time.time()) < 60
    Webhook(secret).verify(got.body, h)
    row = await conn.fetchrow("SELECT * FROM webhook_queue WHERE id = $1", ids[0])
    assert row["status"] == "delivered"
    assert row["attempt_count"] == 1
    assert row["last_status_code"] == 200
    assert row["delivered_at"] is not None
    assert row["last_response_ms"] is not None
    assert (
        await conn.fetchval("SELECT count(*) FROM endpoint_latency WHERE endpoint_id=$1", eid) == 1
    )


async def test_same_event_id_is_delivered_once_with_same_id_on_retries(
    conn: asyncpg.Connection, db_url: str, receiver: Receiver
) -> None:
    receiver.routes["/flaky"] = sequence(500, 503)
    await add_endpoint(conn, receiver.url("/flaky"), retry_base_ms=0, retry_cap_ms=0)
    first = await enqueue(conn, "t", {"n": 1}, "evt_same")
    again = await enqueue(conn, "t", {"n": 1}, "evt_same")
    assert first == again
    assert await conn.fetchval("SELECT count(*) FROM webhook_queue") == 1
    await drain(db_url)
    got = receiver.requests_to("/flaky")
    assert len(got) == 3
    assert {g.headers["webhook-id"] for g in got} == {"evt_same"}
    row = await conn.fetchrow("SELECT * FROM webhook_queue")
    assert (row["status"], row["attempt_count"], row["last_status_code"]) == ("delivered", 3, 200)


async def test_a_short_drain_leaves_its_percentiles_stored(
    conn: asyncpg.Connection, db_url: str, receiver: Receiver
) -> None:
    # Shorter than a maintenance round: the stop refreshes them (SPEC's
    # database contract reads them from endpoint_health).
    eid, _ = await add_endpoint(conn, receiver.url("/ok"))
    for i in range(7):
        await enqueue(conn, "t", {"i": i}, f"p{i}")
    await drain(db_url)
    row = await conn.fetchrow(
        "SELECT p50_ms, p95_ms, p99_ms, sample_count FROM endpoint_health WHERE endpoint_id = $1",
        eid,
    )
    assert row["sample_count"] == 7
    assert row["p50_ms"] is not None and row["p50_ms"] <= row["p95_ms"] <= row["p99_ms"]


async def test_retry_schedule_uses_backoff_and_retry_after(
    conn: asyncpg.Connection, db_url: str, receiver: Receiver
) -> None:
    receiver.routes["/busy"] = status(429, {"Retry-After": "120"})
    receiver.routes["/down"] = status(503)
    await add_endpoint(conn, receiver.url("/busy"), event_types=("busy",))
    await add_endpoint(conn, receiver.url("/down"), event_types=("down",),
                       retry_base_ms=10_000, retry_cap_ms=10_000)  # fmt: skip
    await enqueue(conn, "busy", {}, "e1")
    await enqueue(conn, "down", {}, "e2")
    await drain(db_url)
    rows = {
        r["event_id"]: r
        for r in await conn.fetch(
            "SELECT event_id, status, attempt_count, last_status_code, last_error,"
            " extract(epoch FROM next_attempt_at - now()) AS wait_s FROM webhook_queue"
        )
    }
    busy, down = rows["e1"], rows["e2"]
    assert (busy["status"], busy["attempt_count"], busy["last_status_code"]) == ("failed", 1, 429)
    assert busy["wait_s"] >= 115  # never sooner than Retry-After
    assert (down["status"], down["last_status_code"]) == ("failed", 503)
    # Full jitter within the first window; a draw near 0 is already due when read.
    assert -2 <= down["wait_s"] <= 10.5
    assert down["last_error"] == "HTTP 503"


async def test_permanent_failures_and_exhaustion_dead_letter(
    conn: asyncpg.Connection, db_url: str, receiver: Receiver
) -> None:
    receiver.routes["/bad"] = status(422)
    receiver.routes["/redirect"] = status(302, {"Location": receiver.url("/target")})
    receiver.routes["/err"] = status(500)
    await add_endpoint(conn, receiver.url("/bad"), event_types=("bad",))
    await add_endpoint(conn, receiver.url("/redirect"), event_types=("redir",))
    await add_endpoint(conn, receiver.url("/err"), event_types=("err",), max_attempts=3,
                       retry_base_ms=0, retry_cap_ms=0, failure_threshold=100)  # fmt: skip
    await enqueue(conn, "bad", {}, "b")
    await enqueue(conn, "redir", {}, "r")
    await enqueue(conn, "err", {}, "x")
    await drain(db_url)
    rows = {r["event_id"]: r for r in await conn.fetch("SELECT * FROM webhook_queue")}
    assert (rows["b"]["status"], rows["b"]["attempt_count"]) == ("dead_letter", 1)
    assert (rows["r"]["status"], rows["r"]["last_status_code"]) == ("dead_letter", 302)
    assert receiver.requests_to("/target") == []  # redirects are never followed
    assert (rows["x"]["status"], rows["x"]["attempt_count"]) == ("dead_letter", 3)
    assert len(receiver.requests_to("/err")) == 3


async def test_gone_disables_endpoint_and_keeps_rows(
    conn: asyncpg.Connection, db_url: str, receiver: Receiver
) -> None:
    receiver.routes["/gone"] = status(410)
    eid, _ = await add_endpoint(conn, receiver.url("/gone"), max_in_flight=1)
    for i in range(5):
        await enqueue(conn, "t", {"i": i}, f"g{i}")
    await drain(db_url)
    assert len(receiver.requests_to("/gone")) == 1
    ep = await conn.fetchrow("SELECT enabled, disabled_reason FROM endpoints WHERE id=$1", eid)
    assert ep["enabled"] is False and "410" in ep["disabled_reason"]
    assert await statuses(conn) == {"dead_letter": 1, "pending": 4}


async def test_hanging_endpoint_times_out_and_others_flow(
    conn: asyncpg.Connection, db_url: str, receiver: Receiver
) -> None:
    receiver.routes["/hang"] = hang(20)
    hang_id, _ = await add_endpoint(conn, receiver.url("/hang"), event_types=("h",),
                                    timeout_ms=400, retry_base_ms=600_000)  # fmt: skip
    ok_id, _ = await add_endpoint(conn, receiver.url("/ok"), event_types=("o",))
    for i in range(3):
        await enqueue(conn, "h", {"i": i}, f"h{i}")
    for i in range(200):
        await enqueue(conn, "o", {"i": i}, f"o{i}")
    t0 = time.monotonic()
    await drain(db_url)
    assert time.monotonic() - t0 < 15
    assert len(receiver.requests_to("/ok")) == 200
    hung = await conn.fetch("SELECT * FROM webhook_queue WHERE endpoint_id=$1", hang_id)
    assert {r["status"] for r in hung} == {"failed"}
    for r in hung:
        assert r["last_status_code"] is None
        assert "timeout" in r["last_error"]
        assert 350 <= r["last_response_ms"] <= 3000
    done = await conn.fetchval(
        "SELECT count(*) FROM webhook_queue WHERE endpoint_id=$1 AND status='delivered'", ok_id
    )
    assert done == 200


async def test_ssrf_guard_refuses_loopback_by_default(
    conn: asyncpg.Connection, db_url: str, receiver: Receiver
) -> None:
    await add_endpoint(conn, receiver.url("/ok"))
    await add_endpoint(conn, f"http://localhost:{receiver.port}/named")
    await enqueue(conn, "t", {}, "s1")
    await drain(db_url, allow_private_targets=False)
    assert receiver.received == []
    rows = await conn.fetch("SELECT status, last_error FROM webhook_queue ORDER BY id")
    assert [r["status"] for r in rows] == ["dead_letter", "dead_letter"]
    assert all("refused target" in r["last_error"] for r in rows)


async def test_expired_lease_is_reclaimed(
    conn: asyncpg.Connection, db_url: str, receiver: Receiver
) -> None:
    await add_endpoint(conn, receiver.url("/ok"))
    [qid] = await enqueue(conn, "t", {}, "lease")
    await conn.execute(
        "UPDATE webhook_queue SET status='in_flight', locked_by='dead-worker',"
        " next_attempt_at = now() - interval '1 second' WHERE id=$1", qid
    )  # fmt: skip
    await drain(db_url)
    assert await statuses(conn) == {"delivered": 1}
    assert len(receiver.received) == 1


async def test_live_lease_is_not_stolen(
    conn: asyncpg.Connection, db_url: str, receiver: Receiver
) -> None:
    await add_endpoint(conn, receiver.url("/ok"))
    [qid] = await enqueue(conn, "t", {}, "lease")
    await conn.execute(
        "UPDATE webhook_queue SET status='in_flight', locked_by='busy-worker',"
        " next_attempt_at = now() + interval '1 hour' WHERE id=$1", qid
    )  # fmt: skip
    await drain(db_url)
    assert receiver.received == []
    assert await statuses(conn) == {"in_flight": 1}


async def test_disabled_endpoint_receives_nothing_and_keeps_rows(
    conn: asyncpg.Connection, db_url: str, receiver: Receiver
) -> None:
    eid, _ = await add_endpoint(conn, receiver.url("/ok"))
    for i in range(10):
        await enqueue(conn, "t", {"i": i}, f"d{i}")
    await conn.execute("UPDATE endpoints SET enabled=false WHERE id=$1", eid)
    await drain(db_url)
    assert receiver.received == []
    assert await statuses(conn) == {"pending": 10}
    await conn.execute("UPDATE endpoints SET enabled=true WHERE id=$1", eid)
    await drain(db_url)
    assert len(receiver.received) == 10
    assert await statuses(conn) == {"delivered": 10}


async def test_breaker_opens_and_rows_wait_without_spending_attempts(
    conn: asyncpg.Connection, db_url: str, receiver: Receiver
) -> None:
    receiver.routes["/err"] = status(500)
    eid, _ = await add_endpoint(conn, receiver.url("/err"), failure_threshold=3,
                                max_in_flight=1, retry_base_ms=0, retry_cap_ms=0,
                                max_attempts=50, cooldown_s=600)  # fmt: skip
    for i in range(5):
        await enqueue(conn, "t", {"i": i}, f"b{i}")
    await drain(db_url)
    assert len(receiver.requests_to("/err")) == 3
    h = await conn.fetchrow("SELECT * FROM endpoint_health WHERE endpoint_id=$1", eid)
    assert h["state"] == "open" and h["consecutive_failures"] == 3
    assert await conn.fetchval("SELECT sum(attempt_count) FROM webhook_queue") == 3
    transitions = await conn.fetch("SELECT from_state, to_state FROM breaker_transitions")
    assert [(t["from_state"], t["to_state"]) for t in transitions] == [("closed", "open")]


async def test_breaker_half_open_probe_closes_on_success(
    conn: asyncpg.Connection, db_url: str, receiver: Receiver
) -> None:
    receiver.routes["/rec"] = sequence(500, 500)
    eid, _ = await add_endpoint(conn, receiver.url("/rec"), failure_threshold=2,
                                max_in_flight=1, retry_base_ms=0, retry_cap_ms=0,
                                max_attempts=50, cooldown_s=1.0)  # fmt: skip
    for i in range(4):
        await enqueue(conn, "t", {"i": i}, f"p{i}")
    await drain(db_url)  # opens after two failures
    assert (await conn.fetchval("SELECT state FROM endpoint_health")) == "open"
    await asyncio.sleep(1.2)
    await drain(db_url)
    h = await conn.fetchrow("SELECT * FROM endpoint_health WHERE endpoint_id=$1", eid)
    assert h["state"] == "closed" and h["consecutive_failures"] == 0
    assert await statuses(conn) == {"delivered": 4}
    states = [(t["from_state"], t["to_state"]) for t in
              await conn.fetch("SELECT * FROM breaker_transitions ORDER BY at")]  # fmt: skip
    assert states == [("closed", "open"), ("open", "half_open"), ("half_open", "closed")]


async def test_commit_wakes_idle_engine(conn: asyncpg.Connection, db_url: str,
                                        receiver: Receiver) -> None:  # fmt: skip
    """Producers do not NOTIFY (schema 005): the idle probe sees the commit,
    long before the 30 s poll would."""
    from tests.helpers import engine

    await add_endpoint(conn, receiver.url("/ok"))
    e = engine(db_url, poll_interval_s=30.0)
    task = asyncio.create_task(e.run())
    try:
        await asyncio.sleep(0.5)  # engine is idle, probing
        receiver.arrived.clear()
        async with conn.transaction():
            await enqueue(conn, "t", orjson.dumps({"a": 1}), "wake")
        await asyncio.wait_for(receiver.arrived.wait(), 5)
    finally:
        e.stop()
        await asyncio.wait_for(task, 10)
    assert len(receiver.received) == 1


async def test_commits_in_any_order_wake_idle_engine(
    conn: asyncpg.Connection, db_url: str, receiver: Receiver
) -> None:
    """A transaction that inserted first and commits last (its id below rows
    already seen) still wakes the engine at once: the probe counts rows
    above a watermark about a second behind, not above the newest id."""
    from tests.helpers import engine

    await add_endpoint(conn, receiver.url("/ok"))
    other = await asyncpg.connect(db_url)
    e = engine(db_url, poll_interval_s=30.0)
    task = asyncio.create_task(e.run())
    try:
        await asyncio.sleep(0.5)
        slow = other.transaction()
        await slow.start()
        await enqueue(other, "t", orjson.dumps({"n": 1}), "early-id")
        async with conn.transaction():
            await enqueue(conn, "t", orjson.dumps({"n": 2}), "later-id")
        while len(receiver.received) < 1:
            await asyncio.wait_for(receiver.arrived.wait(), 5)
            receiver.arrived.clear()
        await asyncio.sleep(0.2)
        await slow.commit()
        t0 = time.monotonic()
        while len(receiver.received) < 2:
            await asyncio.wait_for(receiver.arrived.wait(), 5)
            receiver.arrived.clear()
        waited = time.monotonic() - t0
    finally:
        e.stop()
        await asyncio.wait_for(task, 10)
        await other.close()
    assert len(receiver.received) == 2
    assert waited < 5  # the poll is 30 s: only the probe can have found it


async def test_commits_wake_no_listener(conn: asyncpg.Connection, db_url: str) -> None:
    """Neither the SQL function nor the bulk COPY sends a NOTIFY: producers'
    commits never take the server-wide notify lock."""
    from dispatcher.db import catalog

    await add_endpoint(conn, "https://example.com/hook")
    seen: list[str] = []
    listener = await asyncpg.connect(db_url)
    await listener.add_listener("dispatcher_due", lambda *args: seen.append(str(args[2])))
    try:
        n = await catalog.enqueue_bulk(conn, [(f"c{i}", "t", "{}", None) for i in range(200)])
        assert n == 200
        async with conn.transaction():
            await enqueue(conn, "t", orjson.dumps({"a": 1}), "one")
        await listener.execute("SELECT pg_notify('marker', '')")  # a round trip after the commits
        await asyncio.sleep(0.2)
    finally:
        await listener.close()
    assert seen == []


async def test_enqueue_inside_rolled_back_transaction_creates_nothing(
    conn: asyncpg.Connection,
) -> None:
    await add_endpoint(conn, "https://example.com/a", event_types=("paid",))
    await add_endpoint(conn, "https://example.com/b", event_types=("refund",))
    tx = conn.transaction()
    await tx.start()
    ids = await conn.fetchval("SELECT dispatcher_enqueue('paid', '{\"x\": 1}', 'tx-1')")
    assert len(ids) == 1
    await tx.rollback()
    assert await conn.fetchval("SELECT count(*) FROM webhook_queue") == 0
    async with conn.transaction():
        ids = await conn.fetchval("SELECT dispatcher_enqueue('paid', '{\"x\": 1}', 'tx-1')")
    again = await conn.fetchval("SELECT dispatcher_enqueue('paid', '{\"x\": 1}', 'tx-1')")
    assert list(ids) == list(again) and len(ids) == 1
    assert await conn.fetchval("SELECT payload::text FROM webhook_queue") == '{"x": 1}'


async def test_concurrent_migrations(empty_db_url: str) -> None:
    from dispatcher import db

    conns = [await asyncpg.connect(empty_db_url) for _ in range(4)]
    try:
        results = await asyncio.gather(*(db.migrate(c) for c in conns))
    finally:
        for c in conns:
            await c.close()
    applied = sorted(len(r) for r in results)
    assert applied[:3] == [0, 0, 0]
    assert applied[3] == len(db.migrations()) + len(db.repeatables())


async def test_sql_enqueue_takes_json_jsonb_and_text(conn: asyncpg.Connection) -> None:
    await add_endpoint(conn, "https://example.com/a")
    await conn.fetchval("SELECT dispatcher_enqueue('t', '{\"b\": 1,  \"a\": 2}', 'lit')")
    await conn.fetchval("SELECT dispatcher_enqueue('t', '{\"b\": 1,  \"a\": 2}'::json, 'js')")
    await conn.fetchval("SELECT dispatcher_enqueue('t', '{\"b\": 1,  \"a\": 2}'::jsonb, 'jb')")
    await conn.fetchval("SELECT dispatcher_enqueue('t', $1::text, 'tx')", '{"b": 1,  "a": 2}')
    rows = dict(await conn.fetch("SELECT event_id, payload::text FROM webhook_queue"))
    assert rows["lit"] == rows["js"] == rows["tx"] == '{"b": 1,  "a": 2}'  # byte for byte
    assert rows["jb"] == '{"a": 2, "b": 1}'  # jsonb is already normalised by the caller
    with pytest.raises(asyncpg.InvalidTextRepresentationError):
        await conn.fetchval("SELECT dispatcher_enqueue('t', 'not json'::text, 'bad')")


async def test_metrics_count_every_attempt_and_delivery(
    conn: asyncpg.Connection, db_url: str, receiver: Receiver
) -> None:
    """Attempt latencies and lags reach /metrics, a timed-out attempt
    (ended by the deadline sweeper) among them."""

    async def first_hangs(r: Receiver, req: web.Request, _: bytes) -> web.StreamResponse:
        if len(r.requests_to(req.path)) == 1:
            await asyncio.sleep(5)
        return web.Response(status=200)

    receiver.routes["/slow-once"] = first_hangs
    await add_endpoint(conn, receiver.url("/ok"), retry_base_ms=0)
    await add_endpoint(conn, receiver.url("/slow-once"), retry_base_ms=0, retry_cap_ms=0,
                       timeout_ms=200)  # fmt: skip
    for i in range(7):
        await enqueue(conn, "t", {"i": i}, f"evt_m{i}")
    metrics = Metrics()
    await asyncio.wait_for(Engine(FAST, db_url, metrics=metrics).run(drain=True), 30)
    text = metrics.render().decode()

    def value(sample: str) -> float:
        [line] = [x for x in text.splitlines() if x.startswith(sample + " ")]
        return float(line.rsplit(" ", 1)[1])

    # 7 events to each of 2 endpoints, one attempt timed out: 15 attempts.
    assert value("dispatcher_attempt_seconds_count") == 15
    assert value('dispatcher_attempt_seconds_bucket{le="+Inf"}') == 15
    assert value('dispatcher_attempt_seconds_bucket{le="0.1"}') <= 14  # not the 0.2 s timeout
    assert value("dispatcher_attempt_seconds_sum") >= 0.2
    assert value("dispatcher_end_to_end_lag_seconds_count") == 14
    assert value('dispatcher_deliveries_total{outcome="delivered"}') == 14
    assert value('dispatcher_deliveries_total{outcome="failed"}') == 1
    # The recorded phases per endpoint (issue 34): 7 answers from /ok and 7
    # from /slow-once (its timed-out attempt had none); a connection or
    # more opened to each.
    ids = [r["id"] for r in await conn.fetch("SELECT id FROM endpoints ORDER BY id")]
    for eid in ids:
        assert value(f'dispatcher_attempt_first_byte_seconds_count{{endpoint="{eid}"}}') == 7
        assert value(f'dispatcher_attempt_connect_seconds_count{{endpoint="{eid}"}}') >= 1
        # Plain HTTP: no handshake to time.
        assert f'dispatcher_attempt_tls_seconds_count{{endpoint="{eid}"}}' not in text
    timed_out = await conn.fetch(
        "SELECT response_ms FROM endpoint_latency WHERE error = 'timeout after 200 ms'"
    )
    assert len(timed_out) == 1 and timed_out[0]["response_ms"] >= 200
    assert await statuses(conn) == {"delivered": 14}
