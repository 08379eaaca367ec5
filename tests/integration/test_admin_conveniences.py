"""The admin API's conveniences: deleting an endpoint, the OpenAPI document at
the root, and what the operator's console reads and writes: endpoint names,
one endpoint's activity, the queue depth over time."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import replace

import aiohttp
import asyncpg
import orjson
import pytest
from aiohttp import web

from dispatcher import enqueue
from dispatcher.web.admin import start_admin
from tests.helpers import FAST, add_endpoint, cli, drain
from tests.receivers import Receiver, sequence

TOKEN = "test-token-456"


@pytest.fixture
async def api(db_url: str) -> AsyncIterator[aiohttp.ClientSession]:
    runner: web.BaseRunner = await start_admin(
        "127.0.0.1:0", replace(FAST, admin_token=TOKEN), db_url
    )
    host, port = runner.addresses[0][:2]
    async with aiohttp.ClientSession(
        base_url=f"http://{host}:{port}", headers={"Authorization": f"Bearer {TOKEN}"}
    ) as s:
        yield s
    await runner.cleanup()


async def _endpoint(s: aiohttp.ClientSession, path: str) -> int:
    async with s.post("/v1/endpoints", json={"url": f"https://example.com{path}"}) as r:
        assert r.status == 201
        return int((await r.json())["id"])


async def test_delete_endpoint(api: aiohttp.ClientSession, conn: asyncpg.Connection) -> None:
    s = api
    a, b, c = [await _endpoint(s, p) for p in ("/a", "/b", "/c")]
    async with s.post("/v1/events", json={"event_type": "t", "payload": {}, "event_id": "e"}) as r:
        assert len((await r.json())["deliveries"]) == 3

    async with s.delete(f"/v1/endpoints/{a}") as r:
        assert r.status == 409
        assert "force" in (await r.json())["error"]
    async with s.delete(f"/v1/endpoints/{a}", params={"force": "maybe"}) as r:
        assert r.status == 400
    async with s.delete(f"/v1/endpoints/{a}", json={"force": "yes"}) as r:
        assert r.status == 400
    async with s.delete(f"/v1/endpoints/{a}", params={"force": "true"}) as r:
        assert r.status == 200
        assert await r.json() == {"id": a, "url": "https://example.com/a", "deleted": True,
                                  "dead_lettered": 1}  # fmt: skip
    async with s.delete(f"/v1/endpoints/{b}", json={"force": True}) as r:
        assert r.status == 200 and (await r.json())["dead_lettered"] == 1
    for eid in (a, b, 999):
        async with s.delete(f"/v1/endpoints/{eid}", params={"force": "true"}) as r:
            assert r.status == 404
        async with s.get(f"/v1/endpoints/{eid}") as r:
            assert r.status == 404
    async with s.get("/v1/endpoints") as r:
        assert [e["id"] for e in await r.json()] == [c]
    rows = await conn.fetch("SELECT endpoint_id, status, last_error FROM webhook_queue ORDER BY 1")
    assert [tuple(r) for r in rows] == [
        (a, "dead_letter", "endpoint deleted"),
        (b, "dead_letter", "endpoint deleted"),
        (c, "pending", None),
    ]
    async with s.get("/v1/dead-letters") as r:  # history stays
        assert {d["endpoint_id"] for d in await r.json()} == {a, b}
    async with s.post("/v1/events", json={"event_type": "t", "payload": {}}) as r:
        assert len((await r.json())["deliveries"]) == 1
    async with s.get("/metrics") as r:  # only live endpoints have breakers
        assert 'dispatcher_breakers{state="closed"} 1.0' in await r.text()


async def test_openapi_also_at_the_root(api: aiohttp.ClientSession) -> None:
    async with api.get("/openapi.json") as r:
        assert r.status == 200
        root = await r.json()
    async with api.get("/v1/openapi.json") as r:
        assert await r.json() == root
    assert root["openapi"].startswith("3.")
    assert "delete" in root["paths"]["/v1/endpoints/{id}"]
    async with aiohttp.ClientSession() as anon:
        async with anon.get(str(api._base_url).rstrip("/") + "/openapi.json") as r:
            assert r.status == 401


async def test_endpoints_carry_a_name_and_description(api: aiohttp.ClientSession) -> None:
    body = {"url": "https://example.com/h", "name": "Billing (prod)", "description": "invoices"}
    async with api.post("/v1/endpoints", json=body) as r:
        assert r.status == 201
        created = await r.json()
    assert created["name"] == "Billing (prod)" and created["description"] == "invoices"
    eid = created["id"]
    async with api.patch(f"/v1/endpoints/{eid}", json={"name": "Billing"}) as r:
        doc = await r.json()
    assert doc["name"] == "Billing" and doc["description"] == "invoices"  # the rest stays
    async with api.patch(f"/v1/endpoints/{eid}", json={"timeout_ms": 5000}) as r:
        assert (await r.json())["name"] == "Billing"
    async with api.patch(f"/v1/endpoints/{eid}", json={"description": None}) as r:
        assert (await r.json())["description"] is None
    for bad in ({"name": ""}, {"name": "x" * 101}, {"name": "a\nb"}, {"name": 7},
                {"description": "bell\x07"}, {"description": "d" * 1001}):  # fmt: skip
        async with api.patch(f"/v1/endpoints/{eid}", json=bad) as r:
            assert r.status == 400, bad
            assert "error" in await r.json()
    async with api.get("/v1/endpoints") as r:
        assert [e["name"] for e in await r.json()] == ["Billing"]
    async with api.get("/v1/endpoints/health") as r:
        assert [e["name"] for e in await r.json()] == ["Billing"]


async def test_endpoint_add_takes_a_name_on_the_command_line(db_url: str) -> None:
    code, out, err = await cli(db_url, "endpoint", "add", "--url", "https://example.com/x",
                               "--name", "Shop", "--description", "orders", "--json")  # fmt: skip
    assert code == 0, err
    doc = orjson.loads(out)
    assert doc["name"] == "Shop" and doc["description"] == "orders"
    for command in (("endpoint", "list"), ("endpoint", "health")):
        code, out, _ = await cli(db_url, *command)
        assert code == 0 and "Shop" in out, command


async def test_endpoint_activity_shows_percentiles_failures_and_breaker(
    api: aiohttp.ClientSession, conn: asyncpg.Connection, db_url: str, receiver: Receiver
) -> None:
    receiver.routes["/p"] = sequence(500, 500)
    eid, _ = await add_endpoint(conn, receiver.url("/p"), failure_threshold=2, cooldown_s=1.0,
                                retry_base_ms=0, retry_cap_ms=0)  # fmt: skip
    for i in range(4):
        await enqueue(conn, "t", {"i": i}, f"a{i}")
    await drain(db_url)
    async with api.get(f"/v1/endpoints/{eid}/activity?minutes=5") as r:
        assert r.status == 200
        doc = await r.json()
    assert doc["bucket_s"] == pytest.approx(2.5)
    assert len(doc["latency"]) == 120
    attempts = await conn.fetch(
        "SELECT status_code FROM endpoint_latency WHERE endpoint_id = $1", eid
    )
    assert sum(p["attempts"] for p in doc["latency"]) == len(attempts) >= 4
    assert sum(p["failures"] for p in doc["latency"]) == 2
    busy = [p for p in doc["latency"] if p["attempts"]]
    assert all(p["p50_ms"] is not None and p["p99_ms"] >= p["p50_ms"] for p in busy)
    assert all(p["p50_ms"] is None for p in doc["latency"] if not p["attempts"])
    sql = "SELECT from_state, to_state FROM breaker_transitions WHERE endpoint_id = $1"
    stored = [tuple(t) for t in await conn.fetch(sql + " ORDER BY at DESC", eid)]
    assert [(t["from_state"], t["to_state"]) for t in doc["transitions"]] == stored
    assert ("closed", "open") in stored
    assert len(doc["failures"]) == 2
    assert {f["status_code"] for f in doc["failures"]} == {500}
    assert all(f["event_id"] and f["event_type"] == "t" for f in doc["failures"])
    async with api.get("/v1/endpoints/999999/activity") as r:
        assert r.status == 404
    async with api.get(f"/v1/endpoints/{eid}/activity?minutes=0") as r:
        assert r.status == 400


async def test_timeline_walks_the_queue_depth_back_from_now(
    api: aiohttp.ClientSession, conn: asyncpg.Connection, db_url: str, receiver: Receiver
) -> None:
    await add_endpoint(conn, receiver.url("/ok"))
    for i in range(7):
        await enqueue(conn, "t", {"i": i}, f"d{i}")
    async with api.get("/v1/timeline?minutes=5") as r:
        waiting = await r.json()
    assert waiting["bucket_s"] == pytest.approx(2.5)
    assert waiting["points"][-1]["depth"] == 7
    assert waiting["points"][0]["depth"] == 0  # five minutes ago nothing was queued
    await drain(db_url)
    async with api.get("/v1/timeline?minutes=5") as r:
        done = (await r.json())["points"]
    assert done[-1]["depth"] == 0
    assert sum(p["enqueued"] for p in done) == sum(p["delivered"] for p in done) == 7
    assert all(p["depth"] >= 0 for p in done)
