"""Requests in the shape each receiver expects: postback URLs with macros,
form and empty bodies, success bodies, filters decided at enqueue."""

from __future__ import annotations

import json
from pathlib import Path
from urllib.parse import parse_qsl

import asyncpg
import orjson
import pytest

from dispatcher import enqueue
from dispatcher.receiver import VerificationError, verify
from tests.helpers import FAST, add_endpoint, admin_api, cli, drain, statuses
from tests.receivers import Receiver, bodies


def _headers(h: dict[str, str]) -> dict[str, str]:
    return {k.lower(): v for k, v in h.items()}


async def test_a_postback_is_a_get_with_its_macros_filled(
    conn: asyncpg.Connection, db_url: str, receiver: Receiver
) -> None:
    template = receiver.url(
        "/pb/{offer.id}?click={click_id}&payout={payout}&ok={flag}&none={gone}"
        "&e={event_id}&t={event_type}&n={attempt}&ts={timestamp}"
    )
    _, secret = await add_endpoint(conn, template, method="GET")
    payload = {"click_id": "a b&c=d/é", "payout": 12.5, "flag": True, "gone": None,
               "offer": {"id": "o/1"}}  # fmt: skip
    await enqueue(conn, "conversion", orjson.dumps(payload).decode(), "evt_pb")
    await drain(db_url)
    [got] = receiver.received
    assert got.method == "GET" and got.body == b""
    # Each value encoded whole: the path keeps one segment, the query its keys.
    assert got.raw.startswith(
        "/pb/o%2F1?click=a%20b%26c%3Dd%2F%C3%A9&payout=12.5&ok=true&none=&e=evt_pb&t=conversion&n=1"
    )
    query = dict(parse_qsl(got.query, keep_blank_values=True))
    assert query["click"] == "a b&c=d/é" and query["t"] == "conversion" and query["n"] == "1"
    h = _headers(got.headers)
    assert query["ts"] == h["webhook-timestamp"]
    assert "content-type" not in h
    verify(b"", h, secret)  # signed over the (empty) body actually sent
    with pytest.raises(VerificationError):
        verify(b"{}", h, secret)


async def test_a_missing_field_dead_letters_at_once_without_sending(
    conn: asyncpg.Connection, db_url: str, receiver: Receiver
) -> None:
    eid, _ = await add_endpoint(conn, receiver.url("/pb?c={click_id}"), method="GET",
                                failure_threshold=1)  # fmt: skip
    for i in range(3):
        await enqueue(conn, "conversion", '{"other": 1}', f"evt_m{i}")
    await enqueue(conn, "conversion", '{"click_id": "x"}', "evt_ok")
    await drain(db_url)
    rows = await conn.fetch("SELECT event_id, status, attempt_count, last_error FROM webhook_queue"
                            " ORDER BY event_id")  # fmt: skip
    by_id = {r["event_id"]: r for r in rows}
    for i in range(3):
        r = by_id[f"evt_m{i}"]
        assert (r["status"], r["attempt_count"], r["last_error"]) == (
            "dead_letter",
            0,
            "missing macro: click_id",
        )
    assert by_id["evt_ok"]["status"] == "delivered"
    assert [g.query for g in receiver.received] == ["c=x"]
    # The payload was at fault, not the endpoint: its breaker never counted it.
    state = await conn.fetchval("SELECT state FROM endpoint_health WHERE endpoint_id = $1", eid)
    assert state == "closed"


async def test_a_form_body_is_signed_as_sent(
    conn: asyncpg.Connection, db_url: str, receiver: Receiver
) -> None:
    _, secret = await add_endpoint(conn, receiver.url("/form"), body="form")
    await enqueue(conn, "t", '{"click id": "a b", "payout": 3, "nested": {"x": 1}}', "evt_f")
    await drain(db_url)
    [got] = receiver.received
    h = _headers(got.headers)
    assert h["content-type"] == "application/x-www-form-urlencoded"
    assert dict(parse_qsl(got.body.decode())) == {"click id": "a b", "payout": "3"}
    verify(got.body, h, secret)
    with pytest.raises(VerificationError):
        verify(b'{"click id": "a b", "payout": 3, "nested": {"x": 1}}', h, secret)


async def test_a_2xx_that_says_success_false_is_retried(
    conn: asyncpg.Connection, db_url: str, receiver: Receiver
) -> None:
    receiver.routes["/pb"] = bodies("success=false", "success=false", "success=true")
    await add_endpoint(conn, receiver.url("/pb"), method="GET", success_body="success=true",
                       retry_base_ms=0, retry_cap_ms=0)  # fmt: skip
    ids = await enqueue(conn, "t", "{}", "evt_s")
    await drain(db_url)
    row = await conn.fetchrow("SELECT * FROM webhook_queue WHERE id = $1", ids[0])
    assert row["status"] == "delivered" and row["attempt_count"] == 3
    assert len(receiver.received) == 3
    errors = await conn.fetch(
        "SELECT status_code, error FROM endpoint_latency ORDER BY measured_at"
    )
    assert [(e["status_code"], e["error"]) for e in errors][:2] == [
        (200, "response did not match success_body")
    ] * 2


async def test_a_receiver_that_never_says_success_dead_letters(
    conn: asyncpg.Connection, db_url: str, receiver: Receiver
) -> None:
    receiver.routes["/pb"] = bodies('{"success": false}')
    await add_endpoint(conn, receiver.url("/pb"), success_body=r'"success":\s*true',
                       retry_base_ms=0, retry_cap_ms=0, max_attempts=2)  # fmt: skip
    await enqueue(conn, "t", "{}", "evt_n")
    await drain(db_url)
    row = await conn.fetchrow("SELECT status, last_error, last_status_code FROM webhook_queue")
    assert dict(row) == {"status": "dead_letter", "last_status_code": 200,
                         "last_error": "response did not match success_body"}  # fmt: skip


@pytest.mark.parametrize("via", ["sql", "cli", "bulk", "api"])
async def test_filters_decide_at_enqueue_the_same_everywhere(
    conn: asyncpg.Connection, db_url: str, receiver: Receiver, via: str, tmp_path: Path
) -> None:
    paid, _ = await add_endpoint(conn, receiver.url("/paid"), filter='{"status": "paid"}')
    wanted = '{"buyer": {"region": "eu"}, "tags": ["vip"]}'
    nested, _ = await add_endpoint(conn, receiver.url("/eu"), filter=wanted)
    everything, _ = await add_endpoint(conn, receiver.url("/all"))
    events = [
        ("e1", {"status": "paid", "buyer": {"region": "eu", "id": 7}, "tags": ["vip", "new"]}),
        ("e2", {"status": "refunded", "buyer": {"region": "eu"}, "tags": ["vip"]}),
        ("e3", {"status": "paid", "buyer": {"region": "us"}}),
        ("e4", [1, 2]),
    ]
    if via == "sql":
        for eid, payload in events:
            await conn.fetchval("SELECT dispatcher_enqueue('order', $1::json, $2)",
                                json.dumps(payload), eid)  # fmt: skip
    elif via == "cli":
        for eid, payload in events:
            code, _, err = await cli(db_url, "enqueue", "--event-type", "order", "--payload",
                                     json.dumps(payload), "--event-id", eid)  # fmt: skip
            assert code == 0, err
    elif via == "bulk":
        f = tmp_path / "events.jsonl"
        f.write_text("".join(json.dumps({"event_type": "order", "payload": p, "event_id": e})
                             + "\n" for e, p in events))  # fmt: skip
        code, _, err = await cli(db_url, "enqueue", "--file", str(f))
        assert code == 0, err
    else:
        async with admin_api(db_url, FAST) as (s, base):
            for eid, payload in events:
                body = {"event_type": "order", "payload": payload, "event_id": eid}
                async with s.post(f"{base}/v1/events", json=body) as r:
                    assert r.status in (200, 201, 202), await r.text()
    rows = await conn.fetch("SELECT endpoint_id, event_id FROM webhook_queue")
    got = {(r["endpoint_id"], r["event_id"]) for r in rows}
    assert got == {(paid, "e1"), (paid, "e3"), (nested, "e1"), (nested, "e2"),
                   *((everything, e) for e, _ in events)}  # fmt: skip


async def test_a_filtered_endpoint_still_gets_what_is_sent_to_it_by_id(
    conn: asyncpg.Connection,
) -> None:
    paid, _ = await add_endpoint(conn, "https://example.com/x", filter='{"status": "paid"}')
    ids = await enqueue(conn, "t", '{"status": "other"}', "evt_direct", endpoint_id=paid)
    assert len(ids) == 1
    assert (await statuses(conn)) == {"pending": 1}


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--url", "https://p.example/pb?c={click_id"], "unbalanced"),
        (["--url", "https://p.example/pb?c={click-id}"], "macro"),
        (["--url", "https://{host}/pb"], "host"),
        (["--url", "https://p.example:{port}/pb"], "host"),
        (["--url", "https://p.example/", "--filter", "[1]"], "filter"),
        (["--url", "https://p.example/", "--filter", "{"], "filter"),
        (["--url", "https://p.example/", "--success-body", "("], "success_body"),
        (["--url", "https://p.example/", "--ordering-key", "user"], "fifo"),
        (["--url", "https://p.example/", "--ordering", "fifo", "--ordering-key", "a b"],
         "ordering_key"),
        (["--url", "https://p.example/", "--client-cert", "/nonexistent.pem",
          "--client-key", "/nonexistent.pem"], "cannot read"),
    ],
)  # fmt: skip
async def test_endpoint_add_refuses_bad_shapes(
    db_url: str, conn: asyncpg.Connection, args: list[str], needle: str
) -> None:
    code, _, err = await cli(db_url, "endpoint", "add", *args)
    assert code == 2, err
    assert needle in err and "Traceback" not in err and len(err.strip().splitlines()) == 1
    assert await conn.fetchval("SELECT count(*) FROM endpoints") == 0


async def test_the_shape_is_listed_and_patchable(db_url: str) -> None:
    code, out, err = await cli(
        db_url, "endpoint", "add", "--url", "https://p.example/pb?c={click_id}", "--method",
        "get", "--success-body", "ok", "--filter", '{"a": 1}', "--ordering", "fifo",
        "--ordering-key", "user.id", "--json",
    )  # fmt: skip
    assert code == 0, err
    doc = json.loads(out)
    assert {k: doc[k] for k in ("method", "body", "success_body", "filter", "ordering",
                                "ordering_key", "client_cert", "client_key")} == {
        "method": "GET", "body": "none", "success_body": "ok", "filter": {"a": 1},
        "ordering": "fifo", "ordering_key": "user.id", "client_cert": None, "client_key": None,
    }  # fmt: skip
    async with admin_api(db_url, FAST) as (s, base):
        patch = {"method": "POST", "filter": None, "ordering": "none", "ordering_key": None}
        async with s.patch(f"{base}/v1/endpoints/{doc['id']}", json=patch) as r:
            assert r.status == 200, await r.text()
            after = await r.json()
    assert (after["method"], after["body"], after["filter"], after["ordering"]) == (
        "POST",
        "json",
        None,
        "none",
    )


async def test_a_payload_jsonb_cannot_hold_still_reaches_unfiltered_endpoints(
    conn: asyncpg.Connection,
) -> None:
    plain, _ = await add_endpoint(conn, "https://example.com/plain")
    await add_endpoint(conn, "https://example.com/f", filter='{"a": "x"}')
    fifo, _ = await add_endpoint(conn, "https://example.com/o", ordering="fifo",
                                 ordering_key="a")  # fmt: skip
    ids = await conn.fetchval(
        "SELECT dispatcher_enqueue('t', $1::json, 'nul')", '{"a": "x\\u0000"}'
    )
    rows = await conn.fetch("SELECT endpoint_id, order_key FROM webhook_queue ORDER BY id")
    assert len(ids) == 2
    assert [(r["endpoint_id"], r["order_key"]) for r in rows] == [(plain, None), (fifo, "")]
