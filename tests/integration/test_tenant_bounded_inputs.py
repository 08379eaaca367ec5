"""Every input bounded, every bad input a 4xx, and bounded memory per
request (issue 32, rows 11, 15 and 16; SPEC "Limits").

A live `dispatcher run --http` (the worker and its API in one process, as
deployed) and two applications, A and B, each with its own `dtk_` token:

- Row 11: A lists its messages, 40 of ~256 KiB each built to be costly as
  Python objects. The server's peak resident memory (VmHWM of the server
  process) may grow a little, not by what parsing every payload took
  (273 MB before); pages are capped in bytes as well as rows, and the
  iterator still walks every message once, newest first. B's requests
  meanwhile are answered promptly.
- Row 15: a malformed `iterator` on any Svix list is one 422 in Svix's
  error shape, never a 500.
- Row 16: metadata at most 16 KiB, `deliver_at`/`deliverAt` at most 366
  days ahead, at most 1000 event types per endpoint, and idempotency rows
  that keep at most 64 KiB of answer.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import sys
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import aiohttp
import asyncpg
import orjson
import pytest

from dispatcher.db import svix as store
from tests.helpers import Served, served

ADMIN = "bounded-inputs-admin-token"
A, B = "tenant-a", "tenant-b"
TIMEOUT = aiohttp.ClientTimeout(total=30)
MiB = 1024 * 1024


Server = Served


@pytest.fixture
async def server(db_url: str) -> AsyncIterator[Server]:
    async with served(db_url, DISPATCHER_ADMIN_TOKEN=ADMIN) as srv:
        yield srv


@dataclass
class Api:
    http: aiohttp.ClientSession
    base: str
    token: str

    async def call(
        self, method: str, path: str, body: Any = None, headers: dict[str, str] | None = None
    ) -> tuple[int, Any, dict[str, str]]:
        data = None if body is None else orjson.dumps(body)
        hdrs = {**({} if data is None else {"Content-Type": "application/json"}), **(headers or {})}
        async with self.http.request(method, self.base + path, data=data, headers=hdrs) as r:
            raw = await r.read()
            doc = orjson.loads(raw) if raw else None
            return r.status, doc, dict(r.headers)

    async def ok(self, method: str, path: str, body: Any = None) -> Any:
        status, doc, _ = await self.call(method, path, body)
        assert status < 300, (method, path, status, doc)
        return doc


@contextlib.asynccontextmanager
async def api(base: str, token: str) -> AsyncIterator[Api]:
    async with aiohttp.ClientSession(
        headers={"Authorization": f"Bearer {token}"}, timeout=TIMEOUT
    ) as s:
        yield Api(s, base, token)


@contextlib.asynccontextmanager
async def tenants(srv: Server) -> AsyncIterator[tuple[Api, Api, Api]]:
    """The admin, then A and B on their own tokens."""
    async with api(srv.base, ADMIN) as admin:
        for app in (A, B):
            await admin.ok("POST", "/v1/applications", {"id": app, "name": app.title()})
        ta = (await admin.ok("POST", f"/v1/applications/{A}/tokens", {}))["token"]
        tb = (await admin.ok("POST", f"/v1/applications/{B}/tokens", {}))["token"]
        async with api(srv.base, ta) as a, api(srv.base, tb) as b:
            yield admin, a, b


# ---------------------------------------------------------------- row 11


def _costly_payload(i: int, size: int = 250 * 1024) -> str:
    """~`size` bytes of JSON that cost ~25x as much as Python objects:
    tens of thousands of one-key objects."""
    one = b'{"k":%d},' % 1
    n = (size - 64) // len(one)
    text = b'{"i":%d,"rows":[' % i + one * (n - 1) + b'{"k":1}]}'
    return text.decode()


async def _walk(a: Api, path: str) -> tuple[list[list[str]], list[dict[str, Any]]]:
    """Every page of a Svix list, following iterators: ids per page, pages."""
    pages: list[dict[str, Any]] = []
    iterator: str | None = None
    while True:
        query = "" if iterator is None else f"&iterator={iterator}"
        doc = await a.ok("GET", f"{path}{query}")
        pages.append(doc)
        if doc["done"]:
            return [[m["id"] for m in p["data"]] for p in pages], pages
        assert doc["iterator"], doc
        iterator = doc["iterator"]


PROBE = """
import asyncio, os, sys, time, json, aiohttp
url, token, stop = sys.argv[1:]
async def main():
    lags = []
    async with aiohttp.ClientSession(headers={"Authorization": "Bearer " + token}) as s:
        while not os.path.exists(stop):
            t0 = time.perf_counter()
            async with s.get(url) as r:
                assert r.status == 200, r.status
                await r.read()
            lags.append(time.perf_counter() - t0)
            if len(lags) == 1:
                print("ready", flush=True)
            await asyncio.sleep(0.02)
    print(json.dumps(lags))
asyncio.run(main())
"""


async def test_a_message_list_of_large_payloads_takes_bounded_memory(
    server: Server, conn: asyncpg.Connection, tmp_path: Path
) -> None:
    n = 40
    async with tenants(server) as (_, a, b):
        await b.ok("POST", "/v1/endpoints", {"url": "http://127.0.0.1:9/b"})
        # Stored as the API stores them, without the server parsing them on the way in.
        texts = {}
        for i in range(n):
            texts[f"msg_{i:03d}"] = _costly_payload(i)
            await store.insert_message(
                conn, A, f"msg_{i:03d}", event_id=None, event_type="big",
                payload=texts[f"msg_{i:03d}"], channels=None, tags=None, deliver_at=None,
            )  # fmt: skip
        # Warm: the code paths, pools and buffers a list needs, with one message.
        await a.ok("GET", f"/api/v1/app/{A}/msg?limit=1")
        normal = []
        for _ in range(10):
            t0 = time.perf_counter()
            await b.ok("GET", "/v1/endpoints")
            normal.append(time.perf_counter() - t0)
        peak0, rss0 = server.memory_kib("VmHWM"), server.memory_kib("VmRSS")

        # B's probe in a process of its own: this one is busy parsing A's pages.
        stop = tmp_path / "stop"
        probe = await asyncio.create_subprocess_exec(
            sys.executable, "-c", PROBE, f"{server.base}/v1/endpoints", b.token, str(stop),
            stdout=asyncio.subprocess.PIPE,
        )  # fmt: skip
        try:
            # Under way (its first answer in) before A starts: a fixed pause
            # was once too short for the probe's start-up beside the suite.
            assert probe.stdout is not None
            ready = await asyncio.wait_for(probe.stdout.readline(), 30)
            assert ready == b"ready\n", ready
            pages, docs = await _walk(a, f"/api/v1/app/{A}/msg?limit=250")
        finally:
            stop.touch()
            out, _ = await asyncio.wait_for(probe.communicate(), 30)
        lags = orjson.loads(out)
        peak1, rss1 = server.memory_kib("VmHWM"), server.memory_kib("VmRSS")
        # One message, its text passed through too; without content, `{}`.
        one = await a.ok("GET", f"/api/v1/app/{A}/msg/msg_003")
        assert one["payload"] == orjson.loads(texts["msg_003"])
        bare = await a.ok("GET", f"/api/v1/app/{A}/msg/msg_003?with_content=false")
        assert bare["payload"] == {}

    grown_mb = (peak1 - peak0) / 1024
    print(
        f"\nrow 11: {n} messages of {len(texts['msg_000']) / 1024:.0f} KiB in {len(pages)} "
        f"pages of {[len(p) for p in pages]}; server peak RSS {peak0 / 1024:.0f} -> "
        f"{peak1 / 1024:.0f} MB (+{grown_mb:.1f} MB), RSS {rss0 / 1024:.0f} -> "
        f"{rss1 / 1024:.0f} MB; B's GET /v1/endpoints normal max "
        f"{max(normal) * 1000:.1f} ms, during A's lists max {max(lags) * 1000:.1f} ms "
        f"({len(lags)} calls)"
    )
    # Parsing them all took ~250 MB; passing the text through, a few pages.
    assert grown_mb < 64, grown_mb
    # Every message once, newest first, across pages cut by bytes.
    ids = [i for page in pages for i in page]
    assert ids == sorted(texts, reverse=True)
    assert len(pages) > 1 and all(0 < len(p) < n for p in pages), [len(p) for p in pages]
    assert all(not d["done"] for d in docs[:-1]) and docs[-1]["done"]
    # The payloads are the stored text, byte for byte.
    got = {m["id"]: m["payload"] for d in docs for m in d["data"]}
    assert got["msg_007"] == orjson.loads(texts["msg_007"])
    # Generous (a 2-core machine running other tests): B is not held up for seconds.
    assert max(lags) < max(normal) + 0.5, (max(normal), max(lags))


# ---------------------------------------------------------------- row 15


def _b64(doc: Any) -> str:
    raw = doc if isinstance(doc, bytes) else orjson.dumps(doc)
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


MALFORMED = [
    _b64(["2024-01-01T00:00:00+00:00"]),  # one part where two are handed out
    _b64(["2024-01-01T00:00:00+00:00", "x", "y"]),
    _b64([]),
    _b64(["", ""]),
    _b64([1, 2]),
    _b64({"a": 1}),
    _b64("text"),
    _b64(b"not json"),
    _b64(["not a time", "msg_1"]),
    _b64(["9999-12-31T23:00:00-05:00", "1"]),
    "%21%21%21",
    "%C3%A9t%C3%A9",
    "a",
    "x" * 4000,
]


async def test_a_malformed_iterator_is_one_422(server: Server) -> None:
    async with tenants(server) as (_, a, _b):
        ep = await a.ok("POST", f"/api/v1/app/{A}/endpoint", {"url": "http://127.0.0.1:9/a"})
        msg = await a.ok("POST", f"/api/v1/app/{A}/msg", {"eventType": "t", "payload": {}})
        lists = [
            f"/api/v1/app/{A}/msg",
            f"/api/v1/app/{A}/attempt/msg/{msg['id']}",
            f"/api/v1/app/{A}/attempt/endpoint/{ep['id']}",
            f"/api/v1/app/{A}/endpoint",
            "/api/v1/event-type",
        ]
        for path in lists:
            for it in MALFORMED:
                status, doc, _ = await a.call("GET", f"{path}?iterator={it}")
                if path.endswith(("/endpoint", "/event-type")) and it in (MALFORMED[0],):
                    # One part is what these lists hand out; it names an item, not a 422.
                    assert status in (200, 422), (path, it, status, doc)
                    continue
                assert status == 422, (path, it[:40], status, doc)
                assert doc["code"] == "validation" and "iterator" in doc["detail"][0]["msg"], doc
            # A real one still works.
            first = await a.ok("GET", f"{path}?limit=1")
            if first["iterator"]:
                await a.ok("GET", f"{path}?limit=1&iterator={first['iterator']}")


# ---------------------------------------------------------------- row 16


async def test_metadata_is_at_most_16_kib(server: Server) -> None:
    fits = {"k": "v" * (16 * 1024 - 20)}
    over = {"k": "v" * (16 * 1024)}
    async with tenants(server) as (admin, a, _b):
        status, doc, _ = await admin.call("POST", "/api/v1/app", {"name": "big", "metadata": over})
        assert status == 422 and "metadata" in str(doc) and "16 KiB" in str(doc), doc
        await admin.ok("POST", "/api/v1/app", {"name": "fits", "metadata": fits})
        # A tenant on its own application and endpoints.
        status, doc, _ = await a.call("PATCH", f"/api/v1/app/{A}", {"metadata": over})
        assert status == 422 and "16 KiB" in str(doc), doc
        status, doc, _ = await a.call(
            "POST", f"/api/v1/app/{A}/endpoint", {"url": "http://127.0.0.1:9/x", "metadata": over}
        )
        assert status == 422 and "metadata" in str(doc), doc
        ep = await a.ok(
            "POST", f"/api/v1/app/{A}/endpoint", {"url": "http://127.0.0.1:9/x", "metadata": fits}
        )
        for method in ("PATCH", "PUT"):
            body = {"url": "http://127.0.0.1:9/x", "metadata": over}
            status, doc, _ = await a.call(method, f"/api/v1/app/{A}/endpoint/{ep['id']}", body)
            assert status == 422 and "16 KiB" in str(doc), (method, doc)
        assert (await a.ok("GET", f"/api/v1/app/{A}/endpoint/{ep['id']}"))["metadata"] == fits


async def test_deliveries_are_scheduled_at_most_366_days_ahead(
    server: Server, conn: asyncpg.Connection
) -> None:
    now = datetime.now(UTC)
    near, far = (now + timedelta(days=365)).isoformat(), (now + timedelta(days=367)).isoformat()
    async with tenants(server) as (_, a, _b):
        await a.ok("POST", "/v1/endpoints", {"url": "http://127.0.0.1:9/a"})
        status, doc, _ = await a.call(
            "POST", "/v1/events", {"event_type": "t", "payload": {}, "deliver_at": far}
        )
        assert status == 400 and "deliver_at" in doc["error"] and "366" in doc["error"], doc
        status, doc, _ = await a.call(
            "POST", f"/api/v1/app/{A}/msg", {"eventType": "t", "payload": {}, "deliverAt": far}
        )
        assert status == 422 and "deliverAt" in str(doc) and "366" in str(doc), doc
        status, doc, _ = await a.call(
            "POST", "/v1/events", {"event_type": "t", "payload": {}, "delay_s": 367 * 86_400}
        )
        assert status == 400, doc
        await a.ok("POST", "/v1/events", {"event_type": "t", "payload": {}, "deliver_at": near})
        await a.ok(
            "POST", f"/api/v1/app/{A}/msg", {"eventType": "t", "payload": {}, "deliverAt": near}
        )
    latest = await conn.fetchval("SELECT max(next_attempt_at) FROM webhook_queue")
    assert latest is not None and latest < now + timedelta(days=366)


async def test_an_endpoint_has_at_most_1000_event_types(server: Server) -> None:
    many = [f"t.{i}" for i in range(1001)]
    async with tenants(server) as (_, a, _b):
        url = "http://127.0.0.1:9/a"
        status, doc, _ = await a.call("POST", "/v1/endpoints", {"url": url, "event_types": many})
        assert status == 400 and "1000" in doc["error"], doc
        status, doc, _ = await a.call(
            "POST", f"/api/v1/app/{A}/endpoint", {"url": url, "filterTypes": many}
        )
        assert status == 422 and "1000" in str(doc), doc
        ep = await a.ok("POST", "/v1/endpoints", {"url": url, "event_types": many[:1000]})
        status, doc, _ = await a.call("PATCH", f"/v1/endpoints/{ep['id']}", {"event_types": many})
        assert status == 400 and "1000" in doc["error"], doc


async def test_idempotency_rows_keep_at_most_64_kib_of_answer(
    server: Server, conn: asyncpg.Connection
) -> None:
    payload = {"blob": "x" * (200 * 1024)}
    async with tenants(server) as (_, a, _b):
        path = f"/api/v1/app/{A}/msg"
        body = {"eventType": "t", "payload": payload}
        key = {"idempotency-key": "big-answer-1"}
        s1, first, _ = await a.call("POST", path, body, key)
        assert s1 == 202 and first["payload"] == payload
        s2, again, h2 = await a.call("POST", path, body, key)
        # The same message, done once; its answer kept without the payload.
        assert s2 == 202 and h2.get("Idempotent-Replayed") == "true", (s2, again)
        assert again["id"] == first["id"] and again["payload"] == {}
        listed = await a.ok("GET", f"{path}?limit=10")
        assert [m["id"] for m in listed["data"]] == [first["id"]]
        # A small answer is kept whole.
        small = {"idempotency-key": "small-answer-1"}
        _, one, _ = await a.call("POST", path, {"eventType": "t", "payload": {"n": 1}}, small)
        _, two, _ = await a.call("POST", path, {"eventType": "t", "payload": {"n": 1}}, small)
        assert one == two and two["payload"] == {"n": 1}
    biggest = await conn.fetchval("SELECT max(octet_length(body)) FROM idempotency_keys")
    assert biggest is not None and biggest <= 64 * 1024, biggest
