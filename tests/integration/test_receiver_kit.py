"""The receiver kit end to end: dispatcher's engine delivers to an aiohttp
receiver on 127.0.0.1 that uses `webhook_middleware` and `claim_once` on the
test database, the way a user would write it.

SPEC: delivery is at-least-once and every attempt of one event carries the
same `webhook-id`, so a receiver that claims the id inside its own
transaction applies each event exactly once. SPEC also says a 4xx other than
408/429 is permanent: a request refused with 401 (wrong secret) becomes a
dead letter at once, and `dlq replay` brings it back once the secrets agree.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import aiohttp
import asyncpg
import pytest
from aiohttp import web
from yarl import URL

from dispatcher import enqueue
from dispatcher.core.signing import Signer, generate_secret
from dispatcher.db import catalog
from dispatcher.receiver import (
    WEBHOOK_BODY,
    WEBHOOK_ID,
    claim_once,
    ensure_idempotency_table,
    webhook_middleware,
)
from tests.helpers import add_endpoint, drain

SECRET = generate_secret()


@dataclass
class Shop:
    """A receiver as its owner would write it: the kit's middleware in front,
    then one transaction per event that claims the id and applies the effect."""

    db_url: str
    secrets: list[str]
    port: int = 0
    answers: list[tuple[str, int]] = field(default_factory=list)  # every response
    applied: list[str] = field(default_factory=list)
    replays: list[str] = field(default_factory=list)
    _runner: web.AppRunner | None = None
    _pool: asyncpg.Pool | None = None

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.port}{path}"

    def statuses(self, path: str) -> list[int]:
        return [code for p, code in self.answers if p == path]

    @web.middleware
    async def _record(self, request: web.Request, handler: Any) -> web.StreamResponse:
        response: web.StreamResponse = await handler(request)
        self.answers.append((request.path, response.status))
        return response

    async def _order_paid(self, request: web.Request) -> web.StreamResponse:
        webhook_id: str = request["webhook_id"]
        order = await request.json()  # the body the middleware verified, cached
        assert self._pool is not None
        async with self._pool.acquire() as conn, conn.transaction():
            if not await claim_once(conn, webhook_id):
                self.replays.append(webhook_id)
                return web.json_response({"duplicate": True})
            await conn.execute(
                "INSERT INTO shop_credits (webhook_id, amount) VALUES ($1, $2)",
                webhook_id,
                order["amount"],
            )
        self.applied.append(webhook_id)
        return web.json_response({"applied": True})

    async def start(self) -> Shop:
        self._pool = await asyncpg.create_pool(self.db_url, min_size=1, max_size=4)
        app = web.Application(middlewares=[self._record, webhook_middleware(self.secrets)])
        app.router.add_post("/{tail:.*}", self._order_paid)
        self._runner = web.AppRunner(app, handle_signals=False, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", self.port)
        await site.start()
        self.port = self._runner.addresses[0][1]
        return self

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
        if self._pool is not None:
            await self._pool.close()


@pytest.fixture
async def shop(db_url: str, conn: asyncpg.Connection) -> AsyncIterator[Shop]:
    await ensure_idempotency_table(conn)
    # Deliberately no unique key: applying an event twice would show as two rows.
    await conn.execute("CREATE TABLE shop_credits (webhook_id text NOT NULL, amount int)")
    s = await Shop(db_url, [SECRET]).start()
    yield s
    await s.stop()


async def credits(conn: asyncpg.Connection) -> list[tuple[str, int]]:
    rows = await conn.fetch("SELECT webhook_id, amount FROM shop_credits ORDER BY webhook_id")
    return [(r["webhook_id"], r["amount"]) for r in rows]


async def claimed(conn: asyncpg.Connection) -> list[str]:
    rows = await conn.fetch("SELECT webhook_id FROM dispatcher_received ORDER BY 1")
    return [r["webhook_id"] for r in rows]


# --------------------------------------------------------------------------
# End to end with the engine
# --------------------------------------------------------------------------


async def test_event_delivered_twice_is_applied_once(
    conn: asyncpg.Connection, db_url: str, shop: Shop
) -> None:
    # Two endpoints of the same receiver: one event id, two deliveries, sent
    # concurrently, so the two claims really race on the primary key.
    await add_endpoint(conn, shop.url("/orders"), secret=SECRET)
    await add_endpoint(conn, shop.url("/orders-mirror"), secret=SECRET)
    ids = await enqueue(conn, "order.paid", {"type": "order.paid", "amount": 42}, "evt_order_1")
    assert len(ids) == 2
    await drain(db_url)

    rows = await conn.fetch("SELECT status, last_status_code FROM webhook_queue ORDER BY id")
    assert [(r["status"], r["last_status_code"]) for r in rows] == [("delivered", 200)] * 2
    assert shop.statuses("/orders") == [200] and shop.statuses("/orders-mirror") == [200]
    assert await credits(conn) == [("evt_order_1", 42)]
    assert await claimed(conn) == ["evt_order_1"]
    assert shop.applied == ["evt_order_1"] and shop.replays == ["evt_order_1"]

    # A replay of a delivered row (as after a lease expiry): sent again with
    # the same id, acknowledged with 200, not applied.
    await conn.execute(
        "UPDATE webhook_queue SET status = 'pending', next_attempt_at = now() WHERE id = $1",
        ids[0],
    )
    await drain(db_url)
    row = await conn.fetchrow("SELECT * FROM webhook_queue WHERE id = $1", ids[0])
    assert (row["status"], row["attempt_count"], row["last_status_code"]) == ("delivered", 2, 200)
    assert shop.statuses("/orders") == [200, 200]
    assert await credits(conn) == [("evt_order_1", 42)]
    assert shop.applied == ["evt_order_1"]
    assert shop.replays == ["evt_order_1", "evt_order_1"]


async def test_many_events_each_applied_once(
    conn: asyncpg.Connection, db_url: str, shop: Shop
) -> None:
    for path in ("/a", "/b", "/c"):
        await add_endpoint(conn, shop.url(path), secret=SECRET)
    for i in range(20):
        await enqueue(conn, "order.paid", {"amount": i}, f"evt_{i:02}")
    await drain(db_url)
    assert await conn.fetchval("SELECT count(*) FROM webhook_queue WHERE status='delivered'") == 60
    assert await credits(conn) == [(f"evt_{i:02}", i) for i in range(20)]
    assert len(shop.replays) == 40


async def test_wrong_secret_gets_401_then_recovers_by_replay(
    conn: asyncpg.Connection, db_url: str, shop: Shop
) -> None:
    _, other_secret = await add_endpoint(conn, shop.url("/orders"), retry_base_ms=0)
    assert other_secret != SECRET
    [qid] = await enqueue(conn, "order.paid", {"amount": 7}, "evt_wrong_secret")
    await drain(db_url)

    assert shop.statuses("/orders") == [401]
    row = await conn.fetchrow("SELECT * FROM webhook_queue WHERE id = $1", qid)
    # SPEC: 4xx other than 408/429 is permanent, so no retry is scheduled.
    assert (row["status"], row["attempt_count"]) == ("dead_letter", 1)
    assert (row["last_status_code"], row["last_error"]) == (401, "HTTP 401")
    assert await credits(conn) == [] and await claimed(conn) == []

    # The receiver learns the endpoint's secret (restart with both), the dead
    # letter is replayed, and the event is applied exactly once.
    await shop.stop()
    fixed = await Shop(db_url, [SECRET, other_secret], port=shop.port).start()
    try:
        assert await catalog.replay_ids(conn, [qid]) == 1
        await drain(db_url)
        row = await conn.fetchrow("SELECT * FROM webhook_queue WHERE id = $1", qid)
        assert (row["status"], row["last_status_code"]) == ("delivered", 200)
        assert fixed.statuses("/orders") == [200]
        assert await credits(conn) == [("evt_wrong_secret", 7)]
    finally:
        await fixed.stop()


async def test_rotated_secret_keeps_verifying_during_grace(
    conn: asyncpg.Connection, db_url: str, shop: Shop
) -> None:
    # The endpoint rotates to a secret the receiver does not know yet; the
    # old one still signs during the grace period, so nothing is refused.
    eid, _ = await add_endpoint(conn, shop.url("/orders"), secret=SECRET)
    await catalog.rotate_secret(conn, eid, generate_secret(), 3600.0)
    await enqueue(conn, "order.paid", {"amount": 1}, "evt_rotated")
    await drain(db_url)
    assert shop.statuses("/orders") == [200]
    assert await credits(conn) == [("evt_rotated", 1)]


# --------------------------------------------------------------------------
# claim_once / ensure_idempotency_table on a real PostgreSQL
# --------------------------------------------------------------------------


async def test_claim_once_first_true_then_false(conn: asyncpg.Connection) -> None:
    await ensure_idempotency_table(conn)
    await ensure_idempotency_table(conn)  # idempotent
    async with conn.transaction():
        assert await claim_once(conn, "evt_1") is True
    async with conn.transaction():
        assert await claim_once(conn, "evt_1") is False
        assert await claim_once(conn, "evt_2") is True
    assert await claimed(conn) == ["evt_1", "evt_2"]


async def test_claim_rolls_back_with_the_effect(conn: asyncpg.Connection) -> None:
    await ensure_idempotency_table(conn)
    with pytest.raises(RuntimeError, match="handler failed"):
        async with conn.transaction():
            assert await claim_once(conn, "evt_fail")
            raise RuntimeError("handler failed")
    async with conn.transaction():
        assert await claim_once(conn, "evt_fail") is True  # the redelivery is applied


async def test_claim_outside_a_transaction_is_refused(conn: asyncpg.Connection) -> None:
    await ensure_idempotency_table(conn)
    with pytest.raises(RuntimeError, match="inside the transaction"):
        await claim_once(conn, "evt_1")
    assert await claimed(conn) == []


@pytest.mark.parametrize("commit", [True, False])
async def test_concurrent_claim_waits_for_the_first(
    conn: asyncpg.Connection, db_url: str, commit: bool
) -> None:
    await ensure_idempotency_table(conn)
    other = await asyncpg.connect(db_url)
    try:
        first = conn.transaction()
        await first.start()
        assert await claim_once(conn, "evt_race") is True

        async def second() -> bool:
            async with other.transaction():
                return await claim_once(other, "evt_race")

        task = asyncio.create_task(second())
        await asyncio.sleep(0.3)
        assert not task.done()  # blocked on the primary key, not guessing
        await (first.commit() if commit else first.rollback())
        assert await asyncio.wait_for(task, 10) is (not commit)
    finally:
        await other.close()
    assert await claimed(conn) == ["evt_race"]


async def test_custom_and_qualified_table(conn: asyncpg.Connection, db_url: str) -> None:
    await conn.execute("CREATE SCHEMA shop")
    # Several processes starting at once must not trip over each other.
    conns = [await asyncpg.connect(db_url) for _ in range(5)]
    try:
        await asyncio.gather(*(ensure_idempotency_table(c, "shop.seen") for c in conns))
    finally:
        for c in conns:
            await c.close()
    await ensure_idempotency_table(conn, "Seen_Events")
    async with conn.transaction():
        assert await claim_once(conn, "e", table="shop.seen") is True
        assert await claim_once(conn, "e", table="Seen_Events") is True
        assert await claim_once(conn, "e", table="shop.seen") is False
    cols = await conn.fetch(
        "SELECT column_name, data_type, column_default FROM information_schema.columns"
        " WHERE table_schema = 'shop' AND table_name = 'seen' ORDER BY ordinal_position"
    )
    assert [(c["column_name"], c["data_type"]) for c in cols] == [
        ("webhook_id", "text"),
        ("received_at", "timestamp with time zone"),
    ]
    assert cols[1]["column_default"] == "now()"
    pk = await conn.fetchval(
        "SELECT pg_get_constraintdef(oid) FROM pg_constraint"
        " WHERE conrelid = 'shop.seen'::regclass AND contype = 'p'"
    )
    assert pk == "PRIMARY KEY (webhook_id)"


async def test_injection_in_table_name_touches_nothing(conn: asyncpg.Connection) -> None:
    await ensure_idempotency_table(conn)
    for table in ("dispatcher_received; DROP TABLE webhook_queue", 'x" OR 1=1'):
        with pytest.raises(ValueError):
            await ensure_idempotency_table(conn, table)
        async with conn.transaction():
            with pytest.raises(ValueError):
                await claim_once(conn, "e", table=table)
    assert await conn.fetchval("SELECT to_regclass('webhook_queue') IS NOT NULL")


# --------------------------------------------------------------------------
# The middleware over real HTTP
# --------------------------------------------------------------------------


@dataclass
class Seen:
    calls: list[dict[str, Any]] = field(default_factory=list)


async def serve(app: web.Application) -> tuple[web.AppRunner, str]:
    runner = web.AppRunner(app, handle_signals=False, access_log=None)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    return runner, f"http://127.0.0.1:{runner.addresses[0][1]}"


def signed(body: bytes, msg_id: str = "evt_mw", ts: int | None = None) -> dict[str, str]:
    ts = int(time.time()) if ts is None else ts
    return {
        "content-type": "application/json",
        "webhook-id": msg_id,
        "webhook-timestamp": str(ts),
        "webhook-signature": Signer((SECRET,)).signature(msg_id, ts, body),
    }


@pytest.fixture
async def kit_app() -> AsyncIterator[tuple[str, Seen]]:
    seen = Seen()

    async def handler(request: web.Request) -> web.StreamResponse:
        call: dict[str, Any] = {"method": request.method, "path": request.path}
        if request.method == "POST" and WEBHOOK_ID in request:
            call.update(
                id=request["webhook_id"],
                typed_id=request[WEBHOOK_ID],
                body=request["webhook_body"],
                typed_body=request[WEBHOOK_BODY],
                read=await request.read(),
                json=await request.json(),
            )
        seen.calls.append(call)
        return web.json_response({"ok": True})

    app = web.Application(middlewares=[webhook_middleware([SECRET])])
    app.router.add_route("*", "/{tail:.*}", handler)
    runner, base = await serve(app)
    yield base, seen
    await runner.cleanup()


async def test_middleware_refuses_unsigned_post_with_json_401(
    kit_app: tuple[str, Seen],
) -> None:
    base, seen = kit_app
    async with aiohttp.ClientSession() as http:
        async with http.post(base + "/hook", data=b'{"amount": 1}') as resp:
            assert resp.status == 401
            assert resp.content_type == "application/json"
            assert await resp.json() == {
                "error": "missing webhook-id, webhook-timestamp, webhook-signature headers"
            }
        stale = signed(b"{}", ts=int(time.time()) - 3600)
        async with http.post(base + "/hook", data=b"{}", headers=stale) as resp:
            assert resp.status == 401
            assert "too old" in (await resp.json())["error"]
        tampered = signed(b'{"amount": 1}')
        async with http.post(base + "/hook", data=b'{"amount": 2}', headers=tampered) as resp:
            assert (resp.status, await resp.json()) == (401, {"error": "no matching signature"})
        async with http.get(base + "/healthz") as resp:  # not a POST: passes through
            assert resp.status == 200
    assert seen.calls == [{"method": "GET", "path": "/healthz"}]


async def test_middleware_hands_id_and_raw_body_to_handler(kit_app: tuple[str, Seen]) -> None:
    base, seen = kit_app
    body = b'{"amount":  1.50, "type": "order.paid"}'
    async with aiohttp.ClientSession() as http:
        async with http.post(base + "/hook", data=body, headers=signed(body)) as resp:
            assert resp.status == 200
        svix = {k.replace("webhook-", "svix-"): v for k, v in signed(body, "evt_svix").items()}
        async with http.post(base + "/hook", data=body, headers=svix) as resp:
            assert resp.status == 200
    first, second = seen.calls
    assert first == {
        "method": "POST",
        "path": "/hook",
        "id": "evt_mw",
        "typed_id": "evt_mw",
        "body": body,
        "typed_body": body,
        "read": body,
        "json": {"amount": 1.5, "type": "order.paid"},
    }
    assert second["id"] == "evt_svix"


async def test_middleware_paths() -> None:
    calls: list[str] = []

    async def handler(request: web.Request) -> web.StreamResponse:
        calls.append(f"{request.method} {request.path}")
        return web.Response(text="ok")

    app = web.Application(
        middlewares=[webhook_middleware(SECRET, paths=["/hook", "/partners/{name}/events"])]
    )
    app.router.add_route("*", "/hook", handler)
    app.router.add_post("/partners/{name}/events", handler)
    app.router.add_post("/open", handler)
    runner, base = await serve(app)
    try:
        async with aiohttp.ClientSession() as http:

            async def status(method: str, url: str | URL, **kw: Any) -> int:
                async with http.request(method, url, **kw) as resp:
                    return resp.status

            assert await status("POST", base + "/open") == 200  # not listed
            assert await status("POST", base + "/hook") == 401
            assert await status("GET", base + "/hook") == 401  # listed: every method
            assert await status("POST", base + "/hook/") == 401  # trailing slash too
            # Percent-encoding cannot sneak past the check.
            assert await status("POST", URL(base + "/ho%6Fk", encoded=True)) == 401
            assert await status("POST", base + "/partners/acme/events") == 401  # route pattern
            body = b'{"x": 1}'
            ok = await status("POST", base + "/partners/acme/events", data=body,
                              headers=signed(body))  # fmt: skip
            assert ok == 200
    finally:
        await runner.cleanup()
    assert calls == ["POST /open", "POST /partners/acme/events"]
