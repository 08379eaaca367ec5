"""The admin API's conveniences: deleting an endpoint, the OpenAPI document at the root."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import replace

import aiohttp
import asyncpg
import pytest
from aiohttp import web

from dispatcher.admin import start_admin
from tests.helpers import FAST

TOKEN = "test-token-456"


@pytest.fixture
async def api(db_url: str) -> AsyncIterator[aiohttp.ClientSession]:
    runner: web.AppRunner = await start_admin(
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
