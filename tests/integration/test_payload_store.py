"""A payload stored once per event (issue 31, SPEC "History, payloads and
retention", schema 025): a fan-out's deliveries, and a Svix message with
its deliveries, share one copy in event_payloads; one delivery keeps its
payload inline. `webhook_queue` (a view over webhook_live) shows every
row's payload as before; erasure takes the copy with it; payload retention
drops whole days, after the deliveries still to be sent took theirs."""

from __future__ import annotations

import json

import asyncpg

from dispatcher import db
from dispatcher.core.retention import Retention
from dispatcher.db import catalog, upkeep
from dispatcher.ops import erasure
from tests.helpers import add_endpoint, drain, tenant_api
from tests.receivers import Receiver
from tests.releases import build_release

ADMIN = "payload-store-admin-token-0123456789"
BODY = {"order": 7, "note": "x" * 2000}
SECRET = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"


async def _copies(conn: asyncpg.Connection) -> int:
    return int(await conn.fetchval("SELECT count(*) FROM event_payloads"))


async def _endpoints(conn: asyncpg.Connection, receiver: Receiver, n: int) -> list[int]:
    return [(await add_endpoint(conn, receiver.url(f"/r{i}")))[0] for i in range(n)]


async def _fan_out(conn: asyncpg.Connection, events: dict[str, dict[str, str]]) -> None:
    """Each event (by id) to every endpoint, through the producers' SQL."""
    for event_id, payload in events.items():
        await conn.fetchval(
            "SELECT dispatcher_enqueue('t', $1::json, $2)", json.dumps(payload), event_id
        )


async def test_a_fan_out_stores_its_payload_once_and_every_receiver_gets_it(
    db_url: str, conn: asyncpg.Connection, receiver: Receiver
) -> None:
    await _endpoints(conn, receiver, 10)
    ids = await conn.fetchval("SELECT dispatcher_enqueue('t', $1::json, 'fan')", json.dumps(BODY))
    assert len(ids) == 10
    assert await _copies(conn) == 1
    inline = await conn.fetchval(
        "SELECT count(*) FROM webhook_live WHERE payload IS NOT NULL AND event_id = 'fan'"
    )
    assert inline == 0
    # The contract's relation reads as before: every row with its payload.
    shown = await conn.fetch("SELECT payload::text FROM webhook_queue WHERE event_id = 'fan'")
    assert [json.loads(r[0]) for r in shown] == [BODY] * 10
    # Ten payloads' worth of rows, one payload's worth of bytes.
    stored = await conn.fetchval("SELECT sum(pg_column_size(body)) FROM event_payloads")
    assert stored < 2 * len(json.dumps(BODY))

    # A repeat of the event stores nothing more and queues nothing more.
    again = await conn.fetchval("SELECT dispatcher_enqueue('t', $1::json, 'fan')", json.dumps(BODY))
    assert sorted(again) == sorted(ids) and await _copies(conn) == 1

    await drain(db_url)
    assert len(receiver.received) == 10
    assert {json.loads(r.body) == BODY for r in receiver.received} == {True}


async def test_one_delivery_keeps_its_payload_inline(
    conn: asyncpg.Connection, receiver: Receiver
) -> None:
    await _endpoints(conn, receiver, 1)
    await conn.fetchval("SELECT dispatcher_enqueue('t', '{\"a\": 1}'::json, 'solo')")
    assert await _copies(conn) == 0
    assert await conn.fetchval("SELECT payload::text FROM webhook_live") == '{"a": 1}'


async def test_bulk_enqueue_stores_each_fanned_out_line_once(
    db_url: str, conn: asyncpg.Connection, receiver: Receiver
) -> None:
    await _endpoints(conn, receiver, 3)
    only = (await add_endpoint(conn, receiver.url("/only"), event_types=["solo"]))[0]
    events = [(f"b{i}", "t", json.dumps({"i": i}), None) for i in range(20)]
    events.append(("direct", "solo", '{"d": 1}', only))
    assert await catalog.enqueue_bulk(conn, events) == 61
    assert await _copies(conn) == 20
    rows = await conn.fetch("SELECT event_id, payload::text FROM webhook_queue")
    assert len(rows) == 61
    assert all(json.loads(r["payload"]) == {"i": int(r["event_id"][1:])}
               for r in rows if r["event_id"] != "direct")  # fmt: skip
    await drain(db_url)
    assert len(receiver.received) == 61


async def test_a_svix_message_and_its_deliveries_share_one_copy(
    db_url: str, conn: asyncpg.Connection
) -> None:
    async with tenant_api(db_url, ADMIN, ["acme"]) as api:
        for i in range(2):
            await api.ok(
                "POST", "/v1/endpoints", {"url": f"https://acme.example/{i}", "app": "acme"}
            )
        await api.ok("POST", "/api/v1/app/acme/msg",
                     {"eventType": "t", "payload": BODY, "eventId": "m1"})  # fmt: skip
        # Even for one endpoint: the message holds the copy its rows name.
        assert await _copies(conn) == 1
        assert await conn.fetchval("SELECT count(*) FROM messages WHERE payload IS NULL") == 1
        msg = await api.ok("GET", "/api/v1/app/acme/msg/m1")
        assert msg["payload"] == BODY
        listed = await api.ok("GET", "/api/v1/app/acme/msg")
        assert listed["data"][0]["payload"] == BODY
        # Its erasure takes the one copy: message and deliveries at once.
        status, _, _ = await api.call("DELETE", "/api/v1/app/acme/msg/m1/content")
        assert status == 204
        assert await _copies(conn) == 0
        assert (await api.ok("GET", "/api/v1/app/acme/msg/m1"))["payload"] == {}
    erased = await conn.fetch("SELECT payload, payload_erased_at FROM webhook_queue")
    assert len(erased) == 2
    assert all(r["payload"] is None and r["payload_erased_at"] for r in erased)


async def test_erasure_by_content_finds_and_removes_a_shared_copy(
    conn: asyncpg.Connection, receiver: Receiver
) -> None:
    await _endpoints(conn, receiver, 3)
    await _fan_out(conn, {"p1": {"user": "u1"}, "p2": {"user": "u2"}})
    assert await _copies(conn) == 2
    got = await erasure.expunge(conn, None, payload_contains={"user": "u1"})
    assert got == {"expunged": 1}
    assert await _copies(conn) == 1
    left = await conn.fetch("SELECT event_id, status, payload::text FROM webhook_queue ORDER BY id")
    assert [(r["event_id"], r["status"]) for r in left if r["payload"] is None] == [
        ("p1", "cancelled")
    ] * 3
    assert {r["payload"] for r in left if r["event_id"] == "p2"} == {'{"user": "u2"}'}


async def test_payload_retention_drops_days_but_not_what_is_still_to_send(
    conn: asyncpg.Connection, receiver: Receiver
) -> None:
    await _endpoints(conn, receiver, 2)
    await _fan_out(conn, {"done": {"k": "sent"}, "wait": {"k": "held"}})
    await conn.execute(
        "UPDATE webhook_live SET status = 'delivered', delivered_at = now() WHERE event_id = 'done'"
    )
    # Maintenance keeps every day within 90 days; a retention of minus one
    # day (as only SQL takes it) puts today's past it.
    await upkeep.maintain(conn, 86400.0, Retention())
    assert await conn.fetchval("SELECT count(*) FROM webhook_queue WHERE payload IS NULL") == 0
    made, dropped = await conn.fetchrow(
        "SELECT * FROM dispatcher_day_partitions('event_payloads', 3, $1)", -86400.0
    )
    assert (made, dropped) == (0, 1)
    rows = {
        r["event_id"]: r
        for r in await conn.fetch(
            "SELECT DISTINCT ON (event_id) event_id, payload::text AS payload,"
            " payload_id FROM webhook_queue ORDER BY event_id"
        )
    }
    assert rows["done"]["payload"] is None  # shows payload_expired
    assert rows["wait"]["payload"] == '{"k": "held"}' and rows["wait"]["payload_id"] is None
    parts = await conn.fetchval(
        "SELECT count(*) FROM pg_inherits WHERE inhparent = 'event_payloads'::regclass"
    )
    assert parts >= 2  # the default and the days ahead still to come


async def test_an_upgrade_keeps_every_row_and_its_inline_payload(
    empty_db_url: str, receiver: Receiver
) -> None:
    conn = await asyncpg.connect(empty_db_url)
    try:
        await build_release(conn, 24)
        for i in range(3):
            await conn.execute(
                "INSERT INTO endpoints (url, secret) VALUES ($1, $2)",
                receiver.url(f"/old{i}"),
                SECRET,
            )
        await conn.fetchval("SELECT dispatcher_enqueue('t', '{\"old\": 1}'::json, 'before')")
        await db.migrate(conn)
        assert await conn.fetchval(
            "SELECT relkind::text FROM pg_class WHERE relname = 'webhook_queue'"
        ) == "v"  # fmt: skip
        # The old rows keep their copies inline; a new fan-out shares one.
        assert await conn.fetchval(
            "SELECT count(*) FROM webhook_queue WHERE payload::text = '{\"old\": 1}'"
        ) == 3  # fmt: skip
        await conn.fetchval("SELECT dispatcher_enqueue('t', '{\"new\": 1}'::json, 'after')")
        assert await _copies(conn) == 1
        # What a hand, a test or an older release writes through the view.
        await conn.execute(
            "INSERT INTO webhook_queue (endpoint_id, event_id, event_type, payload)"
            " SELECT min(id), 'by-hand', 't', '{\"hand\": 1}' FROM endpoints"
        )
        await conn.execute("UPDATE webhook_queue SET max_attempts = 3 WHERE event_id = 'by-hand'")
        assert await conn.fetchval("SELECT count(*) FROM webhook_queue") == 7
    finally:
        await conn.close()
    await drain(empty_db_url)
    assert len(receiver.received) == 7
