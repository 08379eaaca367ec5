"""One application cannot stop, slow or read into delivery for another
(SPEC "Limits: what one application may set, send or provoke"; issue 21).

A live `dispatcher run --http` worker (the worker and its admin API in one
process, as deployed) and two applications. Application A, using only its
own `dtk_` token on the HTTP API, tries every numeric setting at its
extremes, a catastrophic pattern against a receiver built to trigger it,
a receiver that answers garbage, postbacks whose URL macros carry a secret
click id, and a flood of events. Meanwhile application B sends a fresh
event every ~150 ms: each must reach B's receiver within 1 s of being sent
(its POST included), and the worker never exits. Afterwards, nothing A's
receivers sent and nothing A's payloads carried is in any stored error, any
API answer or the worker's log.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import aiohttp
import asyncpg
import orjson
import pytest
from aiohttp import web

from dispatcher.core.models import INTEGRAL, RANGES, UNSET_OK
from dispatcher.db import catalog
from tests.helpers import Served, served
from tests.integration.test_unusable_rows import GarbageServer, in_vocabulary
from tests.receivers import Receiver, status

ADMIN = "abuse-admin-token-0123456789"
A, B = "tenant-a", "tenant-b"
SECRET_CLICK = "CLICK-SECRET-7f3a9c"  # in A's payloads only, put in URLs by macros
EMAIL = "victim@example.com"
MAX_LAG_S = 1.0
CALL_TIMEOUT = aiohttp.ClientTimeout(total=10)  # a stuck server fails the test, never hangs it
B_EVERY_S = 0.15
FLOOD_API = 2000  # events A posts on the API
FLOOD_BULK = 10_000  # and A's producer queues (the service layer): a backlog
SHORT_A = "a" * 4000 + "!"  # under the 4 KiB success_body reads: never matches (a+)+$
LONG_A = "a" * 40_000 + "!"  # tens of KB: RE2 reads its first 4 KiB in linear time

# Extremes of every numeric setting: out of every range, or not a number.
EXTREMES: list[Any] = [1e308, -1e308, -1, 2**31, 2**63 - 1, 10**30, 5e-324, 1.5, "NaN",
                       "Infinity", "-Infinity", "1e308", "1", True, None, [], {}]  # fmt: skip
# Raw bodies a JSON encoder would not write.
RAW_EXTREMES = [b"NaN", b"Infinity", b"-Infinity", b"1e309", b"-1e309", b"1" + b"0" * 400]


def _out_of_range(name: str, value: Any) -> bool:
    low, high = RANGES[name]
    if isinstance(value, bool) or not isinstance(value, int | float):
        return True
    return not low <= value <= high or (name in INTEGRAL and not isinstance(value, int))


def _names_the_range(name: str, value: Any) -> bool:
    """Whether the answer should name the range too: a number of the
    setting's kind (not a string, a bool, a fraction for an integer)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return False
    if name in INTEGRAL and not isinstance(value, int):
        return False
    return abs(value) < 2**63


def _answers(text: str) -> Any:
    async def answer(_: Receiver, __: web.Request, ___: bytes) -> web.StreamResponse:
        return web.Response(status=200, text=text)

    return answer


Worker = Served


@pytest.fixture
async def worker(db_url: str) -> AsyncIterator[Worker]:
    """`dispatcher run --http`: the worker and its admin API, one process."""
    async with served(db_url, DISPATCHER_ADMIN_TOKEN=ADMIN) as w:
        yield w


@pytest.fixture
async def garbage() -> AsyncIterator[GarbageServer]:
    g = await GarbageServer().start()
    yield g
    await g.stop()


@dataclass
class Tenant:
    http: aiohttp.ClientSession
    base: str

    async def call(self, method: str, path: str, body: Any = None,
                   raw: bytes | None = None) -> tuple[int, Any]:  # fmt: skip
        # json, not orjson: it writes integers past 64 bits as they are.
        data = raw if raw is not None else None if body is None else json.dumps(body).encode()
        headers = {} if data is None else {"Content-Type": "application/json"}
        async with self.http.request(method, self.base + path, data=data, headers=headers) as r:
            text = await r.text()
            try:
                return r.status, orjson.loads(text)
            except orjson.JSONDecodeError:
                return r.status, text

    async def ok(self, method: str, path: str, body: Any = None) -> Any:
        code, doc = await self.call(method, path, body)
        assert code < 300, (method, path, code, doc)
        return doc

    async def send(self, event_type: str, event_id: str, payload: Any) -> None:
        body = {"event_type": event_type, "event_id": event_id, "payload": payload}
        code, doc = await self.call("POST", "/v1/events", body)
        assert code == 202, (event_id, code, doc)


@contextlib.asynccontextmanager
async def tenant(base: str, token: str) -> AsyncIterator[Tenant]:
    headers = {"Authorization": f"Bearer {token}"}
    async with aiohttp.ClientSession(headers=headers, timeout=CALL_TIMEOUT) as s:
        yield Tenant(s, base)


def _num(x: float) -> str:
    return str(int(x)) if float(x).is_integer() else repr(x)


async def _until(probe: Any, timeout: float, what: str) -> None:
    loop = asyncio.get_running_loop()
    end = loop.time() + timeout
    while not await probe():
        assert loop.time() < end, f"timed out waiting for {what}"
        await asyncio.sleep(0.1)


# ---------------------------------------------------------------- what A does


async def settings_at_their_extremes(a: Tenant, conn: asyncpg.Connection, url: str) -> int:
    """Every numeric setting at its extremes, on create and on update:
    400 naming the field (and its range, for a number of its kind), and
    nothing created or changed. Returns the endpoint it updated."""
    flood = await a.ok("POST", "/v1/endpoints", {"url": url, "event_types": ["a.flood"]})
    before = await a.ok("GET", f"/v1/endpoints/{flood['id']}")
    for name, (low, high) in RANGES.items():
        for value in EXTREMES:
            if not _out_of_range(name, value) or (value is None and name in UNSET_OK):
                continue  # in range (1.5/s), or null: no rate limit
            for method, path, body in (
                ("POST", "/v1/endpoints", {"url": url, name: value}),
                ("PATCH", f"/v1/endpoints/{flood['id']}", {name: value}),
            ):
                code, doc = await a.call(method, path, body)
                assert code == 400, (method, name, value, code, doc)
                assert name in doc["error"], (name, value, doc)
                if _names_the_range(name, value):
                    assert f"between {_num(low)} and {_num(high)}" in doc["error"], doc
        for raw in RAW_EXTREMES:
            for method, path in (
                ("POST", "/v1/endpoints"),
                ("PATCH", f"/v1/endpoints/{flood['id']}"),
            ):
                text = b'{"url": "%s", "%s": %s}' % (url.encode(), name.encode(), raw)
                code, doc = await a.call(method, path, raw=text)
                assert code == 400, (method, name, raw, code, doc)
    assert await a.ok("GET", f"/v1/endpoints/{flood['id']}") == before
    mine = await a.ok("GET", "/v1/endpoints")
    assert [e["id"] for e in mine] == [flood["id"]]
    assert await conn.fetchval("SELECT count(*) FROM endpoints WHERE application_id = $1", A) == 1
    return int(flood["id"])


async def hostile_endpoints(a: Tenant, ra: Receiver, garbage: GarbageServer) -> dict[str, int]:
    """A catastrophic pattern (RE2 takes it: created), a receiver answering
    garbage, postbacks whose macros carry a secret click id."""
    # Two attempts, at once, and no breaker in the way: every row ends soon.
    fail_fast = {
        "max_attempts": 2,
        "retry_base_ms": 0,
        "retry_cap_ms": 0,
        "failure_threshold": 10_000,
    }
    made = {}
    specs: dict[str, dict[str, Any]] = {
        "short": {"url": ra.url("/short"), "event_types": ["a.regex"], "success_body": "(a+)+$"},
        "long": {"url": ra.url("/long"), "event_types": ["a.regex"], "success_body": "(a+)+$"},
        "garbage": {"url": garbage.url("/hook"), "event_types": ["a.pb"]},
        "garbage_pb": {
            "url": garbage.url("/pb?click={click_id}&email={email}"),
            "method": "GET",
            "event_types": ["a.pb"],
        },
        "http500_pb": {
            "url": ra.url("/pb?click={click_id}&email={email}"),
            "method": "GET",
            "event_types": ["a.pb"],
        },
        "closed_pb": {
            "url": "http://127.0.0.1:1/pb?click={click_id}",
            "method": "GET",
            "event_types": ["a.pb"],
        },
    }
    for key, spec in specs.items():
        code, doc = await a.call("POST", "/v1/endpoints", spec | fail_fast)
        assert code == 201, (key, code, doc)
        made[key] = int(doc["id"])
    return made


async def flood(a: Tenant, conn: asyncpg.Connection) -> None:
    """A few thousand events: some through A's producer (the service layer,
    one COPY), the rest on the API, 16 requests at a time."""
    payload = orjson.dumps({"click_id": SECRET_CLICK, "email": EMAIL}).decode()
    await catalog.enqueue_bulk(
        conn, [(f"a-bulk-{i}", "a.flood", payload, None, A) for i in range(FLOOD_BULK)]
    )
    queue: asyncio.Queue[int] = asyncio.Queue()
    for i in range(FLOOD_API):
        queue.put_nowait(i)

    async def post() -> None:
        while not queue.empty():
            i = queue.get_nowait()
            body = {"event_type": "a.flood", "event_id": f"a-api-{i}",
                    "payload": {"i": i, "click_id": SECRET_CLICK, "email": EMAIL}}  # fmt: skip
            code, doc = await a.call("POST", "/v1/events", body)
            assert code == 202, (code, doc)

    await asyncio.gather(*(post() for _ in range(16)))


# ---------------------------------------------------------------- the test


@pytest.mark.serial  # B's lag must measure A's harm, not other tests' CPU
async def test_one_application_cannot_stop_slow_or_read_into_another(
    db_url: str, conn: asyncpg.Connection, worker: Worker, garbage: GarbageServer
) -> None:
    ra, rb = await Receiver().start(), await Receiver().start()
    ra.routes["/short"] = _answers(SHORT_A)
    ra.routes["/long"] = _answers(LONG_A)
    ra.routes["/pb"] = status(500)
    try:
        async with tenant(worker.base, ADMIN) as admin:
            for app in (A, B):
                await admin.ok("POST", "/v1/applications", {"id": app, "name": app.title()})
            token_a = (await admin.ok("POST", f"/v1/applications/{A}/tokens", {}))["token"]
            token_b = (await admin.ok("POST", f"/v1/applications/{B}/tokens", {}))["token"]
        assert token_a.startswith("dtk_") and token_b.startswith("dtk_")
        async with tenant(worker.base, token_a) as a, tenant(worker.base, token_b) as b:
            await asyncio.wait_for(_run(a, b, conn, worker, ra, rb, garbage), 120)
    finally:
        await ra.stop()
        await rb.stop()


async def _run(a: Tenant, b: Tenant, conn: asyncpg.Connection, worker: Worker,
               ra: Receiver, rb: Receiver, garbage: GarbageServer) -> None:  # fmt: skip
    await b.ok("POST", "/v1/endpoints", {"url": rb.url("/b"), "event_types": ["b.tick"]})
    # B is under way before A starts: its endpoint is known to the worker.
    await b.send("b.tick", "b-warm", {})

    async def warm() -> bool:
        return bool(rb.received)

    await _until(warm, 15, "B's first event")

    sent: dict[str, float] = {}
    answered: list[float] = []  # B's POST /v1/events, seconds
    health: list[float] = []  # GET /healthz, seconds
    stop = asyncio.Event()

    async def produce_b() -> None:
        n = 0
        while not stop.is_set():
            event_id = f"b-{n}"
            n += 1
            t0 = time.time()
            sent[event_id] = t0
            await b.send("b.tick", event_id, {"n": n})
            answered.append(time.time() - t0)
            t1 = time.time()
            async with b.http.get(b.base + "/healthz") as r:
                assert r.status == 200
            health.append(time.time() - t1)
            assert worker.alive(), "the worker exited"
            await asyncio.sleep(max(0.0, B_EVERY_S - (time.time() - t0)))

    producer = asyncio.create_task(produce_b())
    t_start = time.monotonic()
    try:
        await settings_at_their_extremes(a, conn, ra.url("/fast"))
        hostile = await hostile_endpoints(a, ra, garbage)
        await asyncio.sleep(1.5)  # A's new endpoints reach the worker's refresh
        for i in range(20):
            await a.send("a.regex", f"a-re-{i}", {"i": i})
        for i in range(10):
            payload = {"click_id": f"{SECRET_CLICK}-{i}", "email": EMAIL, "i": i}
            await a.send("a.pb", f"a-pb-{i}", payload)
        await a.send("a.pb", "a-pb-none", {"email": EMAIL})  # no click_id: nothing to send
        await flood(a, conn)

        async def a_settled() -> bool:
            left: int = await conn.fetchval(
                "SELECT count(*) FROM webhook_queue q JOIN endpoints e ON e.id = q.endpoint_id"
                " WHERE e.application_id = $1 AND q.status IN ('pending', 'in_flight', 'failed')",
                A,
            )
            return left == 0

        try:
            await _until(a_settled, 40, "A's deliveries to end")
        except AssertionError:
            left = await conn.fetch(
                "SELECT endpoint_id, status, count(*), max(last_error) AS error"
                " FROM webhook_queue GROUP BY 1, 2 ORDER BY 1, 2"
            )
            raise AssertionError(
                f"A's deliveries never ended: {[tuple(r) for r in left]}"
            ) from None
        await asyncio.sleep(1.0)  # B goes on a little after A's backlog is gone
    finally:
        stop.set()
        await producer
    abuse_s = time.monotonic() - t_start

    # B's events: every one arrived within 1 s of being sent, throughout.
    async def b_done() -> bool:
        got = {r.headers.get("webhook-id") for r in rb.received}
        return set(sent) <= got

    with contextlib.suppress(AssertionError):
        await _until(b_done, 5, "B's last events")
    arrived: dict[str, float] = {}
    for got in rb.received:
        arrived.setdefault(got.headers["webhook-id"], got.at)
    missing = sorted(set(sent) - set(arrived))
    assert not missing, f"{len(missing)} of B's {len(sent)} events never arrived: {missing[:5]}"
    lags = sorted((arrived[e] - sent[e], e) for e in sent)
    assert len(sent) >= 0.5 * abuse_s / B_EVERY_S, (len(sent), abuse_s)
    assert lags[-1][0] < MAX_LAG_S, f"B's worst lags: {lags[-5:]}"
    assert max(answered) < MAX_LAG_S and max(health) < MAX_LAG_S, (max(answered), max(health))
    assert worker.alive()

    # A got what it asked for, and nothing more.
    assert len(ra.requests_to("/fast")) >= FLOOD_API + FLOOD_BULK
    by_endpoint = {
        k: await conn.fetch(
            "SELECT event_id, status, last_error FROM webhook_queue WHERE endpoint_id = $1", v
        )
        for k, v in hostile.items()
    }
    assert [(r["status"], r["last_error"]) for r in by_endpoint["short"]] == [
        ("dead_letter", "response did not match success_body")
    ] * 20
    assert len(ra.requests_to("/short")) >= 40  # two attempts each, none lost to a hung loop
    for r in by_endpoint["long"]:  # its first 4 KiB are all 'a': a match
        assert (r["status"], r["last_error"]) in (
            ("delivered", None), ("dead_letter", "response did not match success_body"),
        )  # fmt: skip
    for key in ("garbage", "garbage_pb"):
        assert garbage.requests > 0
        for r in by_endpoint[key]:
            if r["event_id"] == "a-pb-none" and key == "garbage_pb":
                assert r["last_error"] == "missing macro: click_id"
            else:
                assert r["status"] == "dead_letter" and r["last_error"].startswith(
                    "bad response"
                ), (key, dict(r))
    for r in by_endpoint["http500_pb"]:
        expected = "missing macro: click_id" if r["event_id"] == "a-pb-none" else "HTTP 500"
        assert (r["status"], r["last_error"]) == ("dead_letter", expected)
    for r in by_endpoint["closed_pb"]:
        expected = (
            "missing macro: click_id" if r["event_id"] == "a-pb-none" else "connection refused"
        )
        assert (r["status"], r["last_error"]) == ("dead_letter", expected)

    # Nothing A's payloads carried or A's receivers sent is stored, answered
    # or logged; no stored error holds a URL either.
    leaks = (SECRET_CLICK, EMAIL, "victim%40", "<script", "2OO")
    errors = [r[0] for r in await conn.fetch(
        "SELECT last_error FROM webhook_queue WHERE last_error IS NOT NULL"
        " UNION ALL SELECT error FROM endpoint_latency WHERE error IS NOT NULL")]  # fmt: skip
    assert errors
    for error in errors:
        assert in_vocabulary(error) and not any(x in error for x in (*leaks, "127.0.0.1")), error
    answers = [
        await a.call("GET", "/v1/dead-letters?limit=1000"),
        await a.call("GET", "/v1/deliveries?limit=1000"),
        await a.call("GET", "/v1/deliveries?status=dead_letter&limit=1000"),
        await a.call("GET", "/v1/deliveries?event_id=a-pb-none"),
        await a.call("GET", "/v1/endpoints/health"),
        *[await a.call("GET", f"/v1/deliveries?event_id=a-pb-{i}") for i in range(10)],
        *[await a.call("GET", f"/v1/deliveries?event_id=a-api-{i}") for i in range(3)],
    ]
    for code, doc in answers:
        assert code == 200 and doc, (code, doc)
        # An attempt's record (schema 024, SPEC "Traces and attempt
        # details") is shown within its application, A's own: the postback
        # URL as fired and the start of the answer are A's to read. Nothing
        # else may carry them.
        text = orjson.dumps(_without_attempt_records(doc)).decode()
        assert not any(x in text for x in leaks), text[:2000]
    code, theirs = await b.call("GET", "/v1/dead-letters?limit=1000")
    assert (code, theirs) == (200, [])  # B sees none of A's
    log = worker.log.decode(errors="replace")
    assert "background_task_failed" not in log and "Traceback" not in log, log[-3000:]
    assert not any(x in log for x in leaks), [x for x in leaks if x in log]


_RECORD_FIELDS = ("request_url", "response_excerpt", "response_headers")


def _without_attempt_records(doc: Any) -> Any:
    if isinstance(doc, dict):
        return {k: _without_attempt_records(v) for k, v in doc.items() if k not in _RECORD_FIELDS}
    if isinstance(doc, list):
        return [_without_attempt_records(v) for v in doc]
    return doc
