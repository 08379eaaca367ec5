"""Polling endpoints (issue 33, SPEC "Destinations"): a `poll:` endpoint's
deliveries wait for its consumer, which reads them in order with a cursor
from GET /v1/poll/{endpoint_id}; coming back with the cursor acknowledges
what it read (delivered). No worker ever claims them."""

from __future__ import annotations

import asyncio
import json
import time

import asyncpg
import pytest

from dispatcher.core.retention import DAY_S, Retention
from dispatcher.db import upkeep
from dispatcher.ops import polling as ops_polling
from tests.helpers import drain, statuses, tenant_api

ADMIN = "polling-admin-token-0123456789abcdef"


async def _enqueue(
    conn: asyncpg.Connection, n: int, prefix: str = "p", app: str = "default"
) -> list[str]:
    ids = [f"{prefix}{i}" for i in range(n)]
    for i, event_id in enumerate(ids):
        await conn.fetchval(
            "SELECT dispatcher_enqueue_app($1, 'order.paid', $2::json, $3)",
            app, json.dumps({"n": i}), event_id,
        )  # fmt: skip
    return ids


async def _due(conn: asyncpg.Connection) -> None:
    """The rows were enqueued just now: the route shows a row once it has
    been due a second (ops.polling.POLL_MARGIN_S); moved back instead."""
    await conn.execute("UPDATE webhook_live SET next_attempt_at = next_attempt_at - interval '2 s'")


async def test_a_consumer_reads_in_order_and_its_cursor_acknowledges(
    db_url: str, conn: asyncpg.Connection
) -> None:
    async with tenant_api(db_url, ADMIN, ["acme", "other"]) as api:
        ep = await api.ok("POST", "/v1/endpoints", {"url": "poll:"}, app="acme")
        assert ep["kind"] == "poll" and ep["url"] == "poll:"
        ids = await _enqueue(conn, 7, app="acme")
        await _due(conn)
        # A worker leaves them for the consumer.
        await drain(db_url)
        assert await statuses(conn) == {"pending": 7}

        path = f"/v1/poll/{ep['id']}"
        first = await api.ok("GET", f"{path}?limit=5", app="acme")
        assert [d["event_id"] for d in first["data"]] == ids[:5]
        assert first["data"][0]["payload"] == {"n": 0}
        assert first["data"][0]["event_type"] == "order.paid"
        assert first["done"] is False and first["cursor"]
        assert await statuses(conn) == {"pending": 7}  # read, not yet acknowledged

        second = await api.ok("GET", f"{path}?limit=5&cursor={first['cursor']}", app="acme")
        assert [d["event_id"] for d in second["data"]] == ids[5:]
        assert second["done"] is True
        assert await statuses(conn) == {"delivered": 5, "pending": 2}

        # Reading the same cursor again is the same page: nothing lost.
        again = await api.ok("GET", f"{path}?limit=5&cursor={first['cursor']}", app="acme")
        assert [d["event_id"] for d in again["data"]] == ids[5:]

        last = await api.ok("GET", f"{path}?cursor={second['cursor']}", app="acme")
        assert last["data"] == [] and last["done"] is True
        assert last["cursor"] == second["cursor"]
        assert await statuses(conn) == {"delivered": 7}

        # Another application's endpoint reads like one that does not exist.
        status, _, _ = await api.call("GET", path, app="other")
        assert status == 404
        # The admin may read it.
        assert (await api.ok("GET", path))["data"] == []


async def test_a_long_poll_answers_when_a_delivery_arrives(
    db_url: str, conn: asyncpg.Connection
) -> None:
    async with tenant_api(db_url, ADMIN, []) as api:
        ep = await api.ok("POST", "/v1/endpoints", {"url": "poll:"})
        waiting = asyncio.create_task(api.ok("GET", f"/v1/poll/{ep['id']}?wait_s=10"))
        await asyncio.sleep(0.5)
        assert not waiting.done()
        t0 = time.monotonic()
        await _enqueue(conn, 1, "late")
        doc = await asyncio.wait_for(waiting, 15)
        assert [d["event_id"] for d in doc["data"]] == ["late0"]
        assert time.monotonic() - t0 < 9  # answered on arrival, not at the end of the wait
        # Nothing there and no wait: an empty page at once.
        empty = await api.ok("GET", f"/v1/poll/{ep['id']}?cursor={doc['cursor']}")
        assert empty["data"] == []


async def test_bad_polls_get_one_clear_line(db_url: str, conn: asyncpg.Connection) -> None:
    async with tenant_api(db_url, ADMIN, []) as api:
        http_ep = await api.ok("POST", "/v1/endpoints", {"url": "http://127.0.0.1:9/x"})
        poll_ep = await api.ok("POST", "/v1/endpoints", {"url": "poll:"})
        for path, code, says in (
            (f"/v1/poll/{http_ep['id']}", 400, "not a polling endpoint"),
            (f"/v1/poll/{poll_ep['id']}?cursor=abc", 400, "cursor"),
            (f"/v1/poll/{poll_ep['id']}?limit=0", 400, "limit"),
            (f"/v1/poll/{poll_ep['id']}?limit=-1", 400, "limit"),
            (f"/v1/poll/{poll_ep['id']}?limit=abc", 400, "limit"),
            (f"/v1/poll/{poll_ep['id']}?wait_s=31", 400, "wait_s"),
            (f"/v1/poll/{poll_ep['id']}?wait_s=nan", 400, "wait_s"),
            ("/v1/poll/999999", 404, "no endpoint"),
        ):
            status, doc, _ = await api.call("GET", path)
            assert status == code and says in doc["error"], (path, status, doc)
        status, doc, _ = await api.call("POST", "/v1/endpoints", {"url": "poll:x"})
        assert status == 400 and "poll:" in doc["error"]
        # Above the cap every list route has, capped, not refused.
        assert (await api.ok("GET", f"/v1/poll/{poll_ep['id']}?limit=5000"))["done"] is True


async def test_a_row_is_read_once_committed_unless_a_lower_id_may_still_come(
    db_url: str, conn: asyncpg.Connection
) -> None:
    """With no other transaction writing the live queue, a committed row is
    read at once. While one is (here a producer's open transaction that
    took a lower id), a newer row waits out the margin, so the consumer's
    cursor never passes the lower id before it commits."""
    async with tenant_api(db_url, ADMIN, []) as api:
        ep = await api.ok("POST", "/v1/endpoints", {"url": "poll:"})
        path = f"/v1/poll/{ep['id']}"
        [first] = await _enqueue(conn, 1, "now")
        page = await api.ok("GET", path)
        assert [d["event_id"] for d in page["data"]] == [first]
        producer = await asyncpg.connect(db_url)
        try:
            tx = producer.transaction()
            await tx.start()
            await _enqueue(producer, 1, "slow")  # the lower id, not yet committed
            [later] = await _enqueue(conn, 1, "later")
            held = await api.ok("GET", f"{path}?cursor={page['cursor']}")
            assert held["data"] == [] and held["cursor"] == page["cursor"]
            await tx.commit()
        finally:
            await producer.close()
        page = await api.ok("GET", f"{path}?cursor={page['cursor']}")
        assert [d["event_id"] for d in page["data"]] == ["slow0", later]
        await api.ok("GET", f"{path}?cursor={page['cursor']}")
        assert await statuses(conn) == {"delivered": 3}


async def test_unread_past_the_retention_is_dead_lettered_and_replayable(
    db_url: str, conn: asyncpg.Connection
) -> None:
    async with tenant_api(db_url, ADMIN, []) as api:
        ep = await api.ok("POST", "/v1/endpoints", {"url": "poll:"})
        old, young = await _enqueue(conn, 2, "u")
        # One came due 8 days ago and was never read; the other 6 days ago.
        for event_id, days in ((old, 8), (young, 6)):
            await conn.execute(
                "UPDATE webhook_live SET next_attempt_at = now() - make_interval(days => $2)"
                " WHERE event_id = $1", event_id, days,
            )  # fmt: skip
        await upkeep.maintain(conn, DAY_S, Retention())  # delivered rows: 7 days
        rows = {
            r["event_id"]: (r["status"], r["last_error"])
            for r in await conn.fetch("SELECT event_id, status, last_error FROM webhook_queue")
        }
        assert rows[old] == ("dead_letter", "unread: not fetched within the retention")
        assert rows[young] == ("pending", None)
        page = await api.ok("GET", f"/v1/poll/{ep['id']}")
        assert [d["event_id"] for d in page["data"]] == [young]
        # A replay puts it back in front of the consumer.
        await api.ok("POST", "/v1/dead-letters/replay", {"endpoint_id": ep["id"]})
        await _due(conn)
        page = await api.ok("GET", f"/v1/poll/{ep['id']}")
        assert sorted(d["event_id"] for d in page["data"]) == sorted([old, young])
        # Kept forever (0): nothing expires.
        await conn.execute("UPDATE webhook_live SET next_attempt_at = now() - interval '30 days'")
        await upkeep.maintain(conn, DAY_S, Retention(delivered_s=0))
        assert await statuses(conn) == {"pending": 2}


async def test_a_page_stops_at_its_bytes_and_old_cursors_still_acknowledge(
    db_url: str, conn: asyncpg.Connection, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with tenant_api(db_url, ADMIN, []) as api:
        ep = await api.ok("POST", "/v1/endpoints", {"url": "poll:"})
        path = f"/v1/poll/{ep['id']}"
        ids = await _enqueue(conn, 5, "b")  # payloads of 8 bytes: {"n": 0}
        monkeypatch.setattr(ops_polling, "PAGE_BYTES", 20)
        # Rows that start within 20 bytes: three (0, 8, 16); more are there.
        page = await api.ok("GET", f"{path}?limit=0010")  # leading zeros are a number
        assert [d["event_id"] for d in page["data"]] == ids[:3] and page["done"] is False
        monkeypatch.setattr(ops_polling, "PAGE_BYTES", 1)
        one = await api.ok("GET", f"{path}?cursor={page['cursor']}")
        assert [d["event_id"] for d in one["data"]] == [ids[3]]  # the first row always
        assert one["done"] is False
        # A cursor of the earlier form (`<id>.<read time>`) acknowledges
        # what its page showed: due a second before its read.
        last_id = one["data"][0]["id"]
        old = f"{last_id}.{int((time.time() + 5) * 1_000_000)}"
        await conn.execute("UPDATE webhook_live SET next_attempt_at = now() - interval '3 s'")
        rest = await api.ok("GET", f"{path}?cursor={old}")
        assert [d["event_id"] for d in rest["data"]] == [ids[4]] and rest["done"] is True
        assert await statuses(conn) == {"delivered": 4, "pending": 1}
