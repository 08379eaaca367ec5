"""Traces and attempt details (issue 34, SPEC "Traces and attempt
details"), against a real receiver on 127.0.0.1: a producer's traceparent
(SQL, /v1 and Svix headers) reaches every attempt's request with the same
trace id and a span of its own; each attempt records its timings, who
answered, the answer's headers (credentials redacted) and first bytes, and
a postback's URL as fired; GET /v1/deliveries/{id} lists them; erasure takes
the excerpt and the URL with the payload."""

from __future__ import annotations

import csv
import io
from typing import Any

import asyncpg
import orjson
from aiohttp import web

from tests.helpers import FAST, add_endpoint, admin_api, drain
from tests.receivers import Receiver

TRACE = "0af7651916cd43dd8448eb211c80319c"
PARENT = f"00-{TRACE}-b7ad6b7169203331-01"


def _boom(status: int) -> Any:
    async def answer(_: Receiver, __: web.Request, ___: bytes) -> web.StreamResponse:
        return web.Response(
            status=status, text="boom: " + "x" * 5000,
            headers={"X-Request-Id": "req-42", "Set-Cookie": "sid=secret", "X-Api-Key": "k"},
        )  # fmt: skip

    return answer


async def _attempts(db_url: str, delivery_id: int) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    async with admin_api(db_url, FAST) as (s, base):
        async with s.get(f"{base}/v1/deliveries/{delivery_id}") as r:
            assert r.status == 200, await r.text()
            doc = await r.json()
    return doc, doc["attempts"]


async def test_a_failed_attempt_is_traced_and_recorded(
    db_url: str, conn: asyncpg.Connection, receiver: Receiver
) -> None:
    receiver.routes["/fail"] = _boom(500)
    await add_endpoint(conn, receiver.url("/fail"), max_attempts=1)
    [did] = await conn.fetchval(
        "SELECT dispatcher_enqueue('t', '{\"n\": 1}'::jsonb, 'traced', traceparent => $1,"
        " tracestate => 'vendor=1')",
        PARENT,
    )
    await drain(db_url)
    [req] = receiver.received
    version, trace, span, flags = req.headers["traceparent"].split("-")
    assert (version, trace, flags) == ("00", TRACE, "01") and span != PARENT.split("-")[2]
    assert req.headers["tracestate"] == "vendor=1"
    doc, [a] = await _attempts(db_url, did)
    assert a["status_code"] == 500 and doc["status"] == "dead_letter"
    t = a["timings_ms"]
    assert set(t) == {"dns", "connect", "tls", "ttfb", "total"}
    assert t["connect"] is not None and t["ttfb"] is not None and t["total"] >= t["ttfb"]
    assert t["dns"] is None and t["tls"] is None  # an IP literal, plain HTTP
    assert a["remote_addr"] == "127.0.0.1"
    headers = a["response_headers"]
    assert headers["x-request-id"] == "req-42"
    assert headers["set-cookie"] == headers["x-api-key"] == "[redacted]"
    assert a["response_excerpt"].startswith("boom: x") and len(a["response_excerpt"]) == 4096
    assert a["request_url"] is None  # not a postback
    stored = await conn.fetchval("SELECT detail->>'span_id' FROM endpoint_latency")
    assert stored == span


async def test_a_postback_keeps_its_fired_url_until_erased(
    db_url: str, conn: asyncpg.Connection, receiver: Receiver
) -> None:
    url = receiver.url("/pb") + "?click={click_id}&e={event_id}"
    await add_endpoint(conn, url, method="GET")
    [did] = await conn.fetchval(
        "SELECT dispatcher_enqueue('conv', '{\"click_id\": \"c-9\"}'::jsonb, 'pb-1')"
    )
    await drain(db_url)
    [req] = receiver.received
    assert "traceparent" not in req.headers  # none given, none sent
    _, [a] = await _attempts(db_url, did)
    assert a["status_code"] == 200 and a["request_url"].endswith("/pb?click=c-9&e=pb-1")
    assert a["response_excerpt"] == "ok" and a["response_headers"]
    gone = await conn.fetchval("SELECT dispatcher_erase_deliveries(ARRAY[$1::bigint])", did)
    assert gone is not None
    _, [a] = await _attempts(db_url, did)
    assert a["request_url"] is None and a["response_excerpt"] is None
    assert a["response_headers"] is None  # SPEC "Limits": erased with the payload
    assert a["timings_ms"]["total"] is not None  # the timings stay


async def test_the_http_routes_take_the_trace_headers(
    db_url: str, conn: asyncpg.Connection
) -> None:
    await add_endpoint(conn, "https://trace.example/r")
    async with admin_api(db_url, FAST) as (s, base):
        for event_id, parent in (("good", PARENT), ("bad", "00-zz-not-a-trace"),
                                 ("zeros", f"00-{'0' * 32}-b7ad6b7169203331-01")):  # fmt: skip
            body = {"event_type": "t", "payload": {}, "event_id": event_id}
            trace = {"traceparent": parent, "tracestate": "a=b"}
            async with s.post(f"{base}/v1/events", json=body, headers=trace) as r:
                assert r.status == 202, await r.text()
        async with s.post(f"{base}/api/v1/app/default/msg",
                          json={"eventType": "t", "payload": {}, "eventId": "svix-1"},
                          headers={"traceparent": PARENT}) as r:  # fmt: skip
            assert r.status == 202, await r.text()
    rows = {r["event_id"]: (r["traceparent"], r["tracestate"]) for r in await conn.fetch(
        "SELECT event_id, traceparent, tracestate FROM webhook_queue")}  # fmt: skip
    assert rows == {"good": (PARENT, "a=b"), "bad": (None, None), "zeros": (None, None),
                    "svix-1": (PARENT, None)}  # fmt: skip


async def test_deliveries_export_as_jsonl_and_csv(db_url: str, conn: asyncpg.Connection) -> None:
    ep, _ = await add_endpoint(conn, "https://export.example/r")
    await conn.execute(
        "INSERT INTO webhook_queue (endpoint_id, event_id, event_type, payload)"
        " SELECT $1, 'x' || g, 't', '{}' FROM generate_series(1, 2500) g",
        ep,
    )
    async with admin_api(db_url, FAST) as (s, base):
        async with s.get(f"{base}/v1/deliveries?format=jsonl&endpoint_id={ep}") as r:
            assert r.status == 200 and r.content_type == "application/x-ndjson"
            lines = (await r.read()).splitlines()
        docs = [orjson.loads(x) for x in lines]
        assert len(docs) == 2500 and len({d["id"] for d in docs}) == 2500
        assert [d["id"] for d in docs] == sorted((d["id"] for d in docs), reverse=True)
        async with s.get(f"{base}/v1/deliveries?format=csv&limit=1200&status=pending") as r:
            assert r.status == 200 and r.content_type == "text/csv"
            rows = list(csv.reader(io.StringIO(await r.text())))
        assert rows[0][:3] == ["id", "endpoint_id", "app"] and len(rows) == 1 + 1200
        last = rows[-1][0]
        async with s.get(f"{base}/v1/deliveries?format=csv&cursor={last}") as r:
            more = list(csv.reader(io.StringIO(await r.text())))
        assert len(more) == 1 + 1300 and int(more[1][0]) < int(last)
        async with s.get(f"{base}/v1/deliveries?format=xml") as r:
            assert r.status == 400
