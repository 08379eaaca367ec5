"""The admin HTTP API on a live server: every route, with and without the token."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import replace

import aiohttp
import asyncpg
import pytest
from aiohttp import web

from dispatcher.web.admin import PercentileRefresh, start_admin
from tests.helpers import FAST, drain
from tests.receivers import Receiver, status

TOKEN = "test-token-123"


@pytest.fixture
async def api(db_url: str) -> AsyncIterator[tuple[str, aiohttp.ClientSession]]:
    # Many wrong tokens from one address: test_credential_limits throttles them.
    settings = replace(FAST, admin_token=TOKEN, auth_failures_per_min=1_000_000)
    runner: web.BaseRunner = await start_admin("127.0.0.1:0", settings, db_url)
    host, port = runner.addresses[0][:2]
    async with aiohttp.ClientSession(
        base_url=f"http://{host}:{port}", headers={"Authorization": f"Bearer {TOKEN}"}
    ) as s:
        yield f"http://{host}:{port}", s
    await runner.cleanup()


PROTECTED = [
    ("GET", "/metrics"),
    ("GET", "/"),
    ("GET", "/v1/openapi.json"),
    ("GET", "/openapi.json"),
    ("GET", "/v1/endpoints"),
    ("POST", "/v1/endpoints"),
    ("GET", "/v1/endpoints/1"),
    ("PATCH", "/v1/endpoints/1"),
    ("DELETE", "/v1/endpoints/1"),
    ("POST", "/v1/endpoints/1/disable"),
    ("POST", "/v1/endpoints/1/enable"),
    ("POST", "/v1/endpoints/1/rotate-secret"),
    ("GET", "/v1/endpoints/health"),
    ("POST", "/v1/events"),
    ("GET", "/v1/deliveries?event_id=x"),
    ("GET", "/v1/dead-letters"),
    ("GET", "/v1/dead-letters/analyze"),
    ("POST", "/v1/dead-letters/replay"),
    ("GET", "/v1/health"),
    ("GET", "/v1/alerts"),
    ("GET", "/v1/timeline"),
    ("PATCH", "/v1/applications/default"),
]


def test_percentiles_are_refreshed_at_most_once_per_interval() -> None:
    refresh = PercentileRefresh(every_s=5.0)
    assert refresh.claim(100.0)  # the first read of a server refreshes
    assert not refresh.claim(100.0) and not refresh.claim(104.9)
    assert refresh.claim(105.0)
    assert not refresh.claim(106.0)  # counted from the last refresh, not the first
    assert refresh.claim(110.0)


async def test_token_guards_everything_but_probes(api: tuple[str, aiohttp.ClientSession]) -> None:
    base, _ = api
    async with aiohttp.ClientSession() as anon:
        for method, path in PROTECTED:
            async with anon.request(method, base + path) as r:
                assert r.status == 401, (method, path)
            async with anon.request(
                method, base + path, headers={"Authorization": "Bearer wrong"}
            ) as r:
                assert r.status == 401, (method, path)
        async with anon.get(base + "/healthz") as r:
            assert r.status == 200
        async with anon.get(base + "/readyz") as r:
            assert r.status == 200 and (await r.json())["ready"] is True


async def test_routes_with_token(api: tuple[str, aiohttp.ClientSession], db_url: str,
                                 receiver: Receiver, conn: asyncpg.Connection) -> None:  # fmt: skip
    _, s = api
    receiver.routes["/dead"] = status(403)
    async with s.post("/v1/endpoints", json={"url": receiver.url("/ok"),
                                             "event_types": ["order.paid"]}) as r:  # fmt: skip
        assert r.status == 201
        ok = await r.json()
        assert ok["secret"].startswith("whsec_")
    async with s.post("/v1/endpoints", json={"url": receiver.url("/dead"), "max_attempts": 1}) as r:
        dead = await r.json()
    async with s.post("/v1/endpoints", json={"url": "ftp://nope"}) as r:
        assert r.status == 400 and "error" in await r.json()
    async with s.post("/v1/endpoints", json={"url": receiver.url("/x"), "bogus": 1}) as r:
        assert r.status == 400
    async with s.get("/v1/endpoints") as r:
        listed = await r.json()
        assert [e["id"] for e in listed] == [ok["id"], dead["id"]]
        assert all("secret" not in e for e in listed)
    async with s.patch(f"/v1/endpoints/{ok['id']}", json={"timeout_ms": 5000}) as r:
        assert (await r.json())["timeout_ms"] == 5000
    async with s.get("/v1/endpoints/999") as r:
        assert r.status == 404
    async with s.post(f"/v1/endpoints/{ok['id']}/rotate-secret", json={"grace_s": 60}) as r:
        rotated = await r.json()
        assert rotated["secret"] != ok["secret"]
    async with s.post(f"/v1/endpoints/{ok['id']}/disable") as r:
        assert (await r.json())["enabled"] is False
    async with s.post(f"/v1/endpoints/{ok['id']}/enable") as r:
        assert (await r.json())["enabled"] is True

    async with s.post("/v1/events", json={"event_type": "order.paid", "payload": {"a": 1},
                                          "event_id": "ev-api"}) as r:  # fmt: skip
        assert r.status == 202
        doc = await r.json()
        assert doc["event_id"] == "ev-api" and len(doc["deliveries"]) == 2
    async with s.post("/v1/events", json={"event_type": "order.paid"}) as r:
        assert r.status == 400
    await drain(db_url)

    async with s.get("/v1/deliveries", params={"event_id": "ev-api"}) as r:
        doc = await r.json()
        rows = doc["deliveries"]
        assert doc["next_cursor"] is None
        assert {row["status"] for row in rows} == {"delivered", "dead_letter"}
        assert all(len(row["attempts"]) == 1 for row in rows)
    async with s.get("/v1/dead-letters") as r:
        [dl] = await r.json()
        assert dl["endpoint_id"] == dead["id"] and dl["last_status_code"] == 403
    async with s.get("/v1/dead-letters/analyze") as r:
        [a] = await r.json()
        assert a["pattern"] == "status-code" and a["primary_status_code"] == 403
    async with s.get("/v1/health") as r:
        h = await r.json()
        assert h["delivered_last_hour"] == 1 and h["dead_letter"] == 1
    async with s.get("/v1/alerts") as r:
        alerts = await r.json()
        assert set(alerts) == {"dead_letters_rising", "oldest_pending", "slow_endpoints"}
        assert alerts["dead_letters_rising"]["firing"] is True
    async with s.get("/v1/endpoints/health") as r:
        assert len(await r.json()) == 2
    async with s.get("/v1/timeline", params={"minutes": "5"}) as r:
        tl = await r.json()
        assert sum(p["enqueued"] for p in tl["points"]) == 2
        assert sum(p["delivered"] for p in tl["points"]) == 1
        assert sum(p["dead"] for p in tl["points"]) == 1
    async with s.get("/metrics") as r:
        text = await r.text()
        assert 'dispatcher_queue_depth{status="dead_letter"} 1.0' in text
    async with s.get("/") as r:
        assert r.status == 200 and "dispatcher" in await r.text()
    async with s.get("/v1/openapi.json") as r:
        spec = await r.json()
        assert "/v1/events" in spec["paths"]
    async with s.post("/v1/dead-letters/replay", json={"endpoint_id": dead["id"]}) as r:
        assert await r.json() == {"requeued": 1}
    async with s.post("/v1/dead-letters/replay", json={}) as r:
        assert r.status == 400


async def test_metrics_name_a_transaction_that_holds_vacuum_back(
    api: tuple[str, aiohttp.ClientSession], db_url: str
) -> None:
    """A session left in a transaction with a snapshot (what stops every
    queue table's vacuum) shows as the age of the oldest such transaction."""

    def oldest(text: str) -> float:
        (line,) = [x for x in text.splitlines() if x.startswith("dispatcher_oldest_xmin_seconds ")]
        return float(line.split()[1])

    _, s = api
    idle = await asyncpg.connect(db_url)
    try:
        tx = idle.transaction(isolation="repeatable_read")
        await tx.start()
        await idle.fetchval("SELECT count(*) FROM webhook_queue")  # takes the snapshot
        await idle.execute("SELECT pg_sleep(1.1)")
        async with s.get("/metrics") as r:
            assert oldest(await r.text()) >= 1.0
        await tx.rollback()
    finally:
        await idle.close()
