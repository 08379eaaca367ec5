"""The deliveries browser on a live admin server (SPEC "Day to day"):
GET /v1/deliveries by any of its filters, newest first, a page at a time;
one delivery's payload and attempts; dead letters a page at a time; the
replay of everything that failed since a time; and schema 014 on a
database that already holds deliveries."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import aiohttp
import asyncpg

from dispatcher import db
from dispatcher.ops import tenancy
from tests.helpers import FAST, add_endpoint, admin_api
from tests.releases import build_release

Rows = list[dict[str, Any]]


async def _get(s: aiohttp.ClientSession, url: str, expect: int = 200) -> Any:
    async with s.get(url) as r:
        assert r.status == expect, (url, r.status, await r.text())
        return await r.json()


async def _world(conn: asyncpg.Connection) -> dict[str, Any]:
    """Two applications; acme's endpoint a has 5 deliveries of order.paid
    and 2 of order.refunded (one dead), globex's endpoint one delivery."""
    await tenancy.add_application(conn, "acme", "Acme Corp")
    await tenancy.add_application(conn, "globex", "Globex")
    a, _ = await add_endpoint(conn, "https://a.example/hook")
    await conn.execute("UPDATE endpoints SET application_id = 'acme' WHERE id = $1", a)
    g, _ = await add_endpoint(conn, "https://g.example/hook")
    await conn.execute("UPDATE endpoints SET application_id = 'globex' WHERE id = $1", g)
    insert = (
        "INSERT INTO webhook_queue (endpoint_id, event_id, event_type, payload, status,"
        " created_at, updated_at) VALUES ($1, $2, $3, $4, $5,"
        " now() - make_interval(hours => $6), now() - make_interval(hours => $6)) RETURNING id"
    )
    ids = {}
    for i in range(5):
        ids[f"paid-{i}"] = await conn.fetchval(
            insert, a, f"paid-{i}", "order.paid", f'{{"n": {i}}}', "delivered", 10 - i
        )
    ids["ref-0"] = await conn.fetchval(insert, a, "ref-0", "order.refunded", '{"r":0}',
                                       "dead_letter", 3)  # fmt: skip
    ids["ref-1"] = await conn.fetchval(insert, a, "ref-1", "order.refunded", '{"r":1}',
                                       "delivered", 1)  # fmt: skip
    ids["glob"] = await conn.fetchval(insert, g, "glob", "order.paid", "{}", "dead_letter", 2)
    await conn.execute(
        "INSERT INTO endpoint_latency (endpoint_id, response_ms, status_code, measured_at,"
        " delivery_id, error) VALUES ($1, 120, 500, now() - interval '170 minutes', $2,"
        " 'HTTP 500')",
        a, ids["ref-0"],
    )  # fmt: skip
    token = (await tenancy.issue_token(conn, "acme"))["token"]
    return {"a": a, "g": g, "ids": ids, "token": token}


async def test_filters_cursor_and_one_delivery(db_url: str, conn: asyncpg.Connection) -> None:
    w = await _world(conn)
    ids = w["ids"]
    async with admin_api(db_url, FAST) as (s, base):
        url = f"{base}/v1/deliveries"
        everything = await _get(s, url)
        assert [d["id"] for d in everything["deliveries"]] == sorted(ids.values(), reverse=True)
        assert everything["next_cursor"] is None

        # A page of 3, then the rest by its cursor: nothing twice, nothing missed.
        first = await _get(s, f"{url}?app=acme&limit=3")
        assert len(first["deliveries"]) == 3 and first["next_cursor"]
        rest = await _get(s, f"{url}?app=acme&limit=3&cursor={first['next_cursor']}")
        last = await _get(s, f"{url}?app=acme&limit=3&cursor={rest['next_cursor']}")
        seen = [d["id"] for p in (first, rest, last) for d in p["deliveries"]]
        assert seen == sorted(set(ids.values()) - {ids["glob"]}, reverse=True)
        assert last["next_cursor"] is None

        by_type = await _get(s, f"{url}?event_type=order.refunded&status=dead_letter")
        assert [d["id"] for d in by_type["deliveries"]] == [ids["ref-0"]]
        assert by_type["deliveries"][0]["app"] == "acme"
        # created in [since, until): 6 h ago up to 2 h ago
        window = await _get(s, f"{url}?since={_ago(6.5)}&until={_ago(2.5)}")
        assert {d["event_id"] for d in window["deliveries"]} == {"paid-4", "ref-0"}
        one = await _get(s, f"{url}?event_id=ref-0")
        assert [a["status_code"] for a in one["deliveries"][0]["attempts"]] == [500]
        assert (await _get(s, f"{url}?endpoint_id={w['g']}"))["deliveries"][0]["id"] == ids["glob"]

        detail = await _get(s, f"{base}/v1/deliveries/{ids['ref-0']}")
        assert detail["payload"] == {"r": 0} and detail["status"] == "dead_letter"
        assert [(a["status_code"], a["error"]) for a in detail["attempts"]] == [(500, "HTTP 500")]

        for bad in ("status=lost", "cursor=abc", "since=yesterday", "limit=0", "endpoint_id=x"):
            assert "error" in await _get(s, f"{url}?{bad}", 400), bad
        await _get(s, f"{base}/v1/deliveries/999999999", 404)

    # An application's credential: its own rows only, another's delivery is 404.
    async with admin_api(db_url, FAST) as (s, base):
        s.headers["Authorization"] = f"Bearer {w['token']}"
        mine = await _get(s, f"{base}/v1/deliveries?limit=1000")
        assert ids["glob"] not in {d["id"] for d in mine["deliveries"]}
        await _get(s, f"{base}/v1/deliveries/{ids['glob']}", 404)
        await _get(s, f"{base}/v1/deliveries?app=globex", 403)
        assert (await _get(s, f"{base}/v1/deliveries/{ids['paid-0']}"))["payload"] == {"n": 0}


def _ago(hours: float) -> str:
    return (datetime.now(UTC) - timedelta(hours=hours)).isoformat().replace("+00:00", "Z")


async def test_dead_letters_by_page_and_replay_since(db_url: str, conn: asyncpg.Connection) -> None:
    w = await _world(conn)
    for i in range(5):
        await conn.execute(
            "INSERT INTO webhook_queue (endpoint_id, event_id, event_type, payload, status,"
            " updated_at) VALUES ($1, $2, 't', '{}', 'dead_letter',"
            " now() - make_interval(mins => $3))",
            w["a"], f"dead-{i}", i,
        )  # fmt: skip
    async with admin_api(db_url, FAST) as (s, base):
        pages: list[Rows] = []
        cursor = ""
        while True:
            async with s.get(f"{base}/v1/dead-letters?app=acme&limit=2&cursor={cursor}") as r:
                assert r.status == 200
                pages.append(await r.json())
                cursor = r.headers.get("X-Next-Cursor", "")
            if not cursor:
                break
        seen = [d["event_id"] for p in pages for d in p]
        assert seen == [*(f"dead-{i}" for i in range(5)), "ref-0"] and len(pages) == 3

        # Everything of acme that died in the last 3 minutes (dead-0..2), nothing of globex.
        body = {"app": "acme", "since": _ago(0.05)}
        async with s.post(f"{base}/v1/dead-letters/replay", json=body) as r:
            assert r.status == 200 and await r.json() == {"requeued": 3}
        async with s.post(f"{base}/v1/dead-letters/replay", json={"app": "acme"}) as r:
            assert r.status == 400  # no time, no endpoint, no ids: refused
    pending = await conn.fetch("SELECT event_id FROM webhook_queue WHERE status = 'pending'")
    assert sorted(r["event_id"] for r in pending) == ["dead-0", "dead-1", "dead-2"]


async def test_migration_014_on_a_queue_with_rows(empty_db_url: str) -> None:
    conn = await asyncpg.connect(empty_db_url)
    try:
        await build_release(conn, 12)
        eid = await conn.fetchval(
            "INSERT INTO endpoints (url, secret) VALUES ('https://a.example/1', 'whsec_x')"
            " RETURNING id"
        )
        await conn.fetchval("SELECT dispatcher_enqueue('t', '{}', 'e1')")
        assert "014_deliveries_browse.sql" in await db.migrate(conn)
        index = await conn.fetchval(
            "SELECT indexdef FROM pg_indexes WHERE indexname = 'webhook_queue_browse_idx'"
        )
        assert "(endpoint_id, id)" in index
        n = await conn.fetchval("SELECT count(*) FROM webhook_queue WHERE endpoint_id = $1", eid)
        assert n == 1
    finally:
        await conn.close()
