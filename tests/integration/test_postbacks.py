"""Postback tooling end to end (SPEC "Postback tooling (affiliate
networks)"): held, released, cancelled and delayed deliveries, the new
built-ins across retries, value maps, a test shot, and auto-disable, on a
real PostgreSQL with real receivers on 127.0.0.1."""

from __future__ import annotations

import asyncio
import contextlib
from urllib.parse import parse_qsl

import asyncpg
import orjson
import pytest

from dispatcher.core.errors import BadInput, NotFound
from dispatcher.core.shaping import postback_id
from dispatcher.db import upkeep
from dispatcher.ops import service
from dispatcher.worker import testshot
from tests.helpers import FAST, add_endpoint, admin_api, drain, engine, statuses, until_received
from tests.receivers import Receiver, bodies, sequence, status


def _query(raw: str) -> dict[str, str]:
    return dict(parse_qsl(raw, keep_blank_values=True))


async def test_held_then_released_is_delivered(
    conn: asyncpg.Connection, db_url: str, receiver: Receiver
) -> None:
    await add_endpoint(conn, receiver.url("/pb"))
    done = await service.enqueue(conn, "conversion", '{"n": 1}', "evt_held", hold=True)
    assert len(done["deliveries"]) == 1
    await drain(db_url)  # a held row does not hold a drain
    assert receiver.received == [] and await statuses(conn) == {"held": 1}
    released = await service.release_event(conn, "evt_held")
    assert released == {"event_id": "evt_held", "released": done["deliveries"]}
    await drain(db_url)
    assert [r.body for r in receiver.received] == [b'{"n": 1}']
    assert await statuses(conn) == {"delivered": 1}
    # Again: nothing more to release.
    assert (await service.release_event(conn, "evt_held"))["released"] == []


async def test_held_then_cancelled_is_never_sent(
    conn: asyncpg.Connection, db_url: str, receiver: Receiver
) -> None:
    await add_endpoint(conn, receiver.url("/pb"))
    await add_endpoint(conn, receiver.url("/pb2"))
    done = await service.enqueue(conn, "conversion", '{"n": 1}', "evt_c", hold=True)
    cancelled = await service.cancel_event(conn, "evt_c", "default")
    assert sorted(cancelled["cancelled"]) == sorted(done["deliveries"])
    assert (await service.release_event(conn, "evt_c"))["released"] == []
    await drain(db_url)
    assert receiver.received == []
    assert await statuses(conn) == {"cancelled": 2}
    with pytest.raises(NotFound):
        await service.cancel_event(conn, "evt_nope")


async def test_a_delayed_delivery_is_not_sent_before_its_time(
    conn: asyncpg.Connection, db_url: str, receiver: Receiver
) -> None:
    await add_endpoint(conn, receiver.url("/pb"))
    await service.enqueue(conn, "conversion", '{"n": 1}', "evt_d", delay_s=1.5)
    await drain(db_url)  # not due: the drain ends without it
    assert receiver.received == [] and await statuses(conn) == {"pending": 1}
    e = engine(db_url)
    task = asyncio.create_task(e.run())
    try:
        await until_received(receiver, 1)
    finally:
        e.stop()
        await asyncio.wait_for(task, 30)
    late = await conn.fetchval(
        "SELECT delivered_at >= created_at + interval '1.5 seconds' FROM webhook_queue"
    )
    assert late is True


async def test_deliver_at_and_hold_through_the_sql_function(conn: asyncpg.Connection) -> None:
    eid, _ = await add_endpoint(conn, "http://127.0.0.1:9/pb")
    ids = await conn.fetchval(
        "SELECT dispatcher_enqueue_app('default', 'conversion', '{}', 'evt_sql',"
        " deliver_at => now() + interval '1 hour', hold => true)"
    )
    row = await conn.fetchrow(
        "SELECT status, next_attempt_at > now() + interval '59 minutes' AS later FROM"
        " webhook_queue WHERE id = $1",
        ids[0],
    )
    assert (row["status"], row["later"]) == ("held", True)
    # Released, it stays due at its deliver_at.
    assert await conn.fetchval("SELECT dispatcher_release_event('default', 'evt_sql')") == ids
    row = await conn.fetchrow("SELECT status, next_attempt_at > now() AS later FROM webhook_queue")
    assert (row["status"], row["later"]) == ("pending", True)
    # Neither a held nor a cancelled row is in the claim's index.
    pred = await conn.fetchval(
        "SELECT pg_get_expr(indpred, indrelid) FROM pg_index"
        " WHERE indexrelid = 'webhook_queue_due_idx'::regclass"
    )
    assert "held" not in pred and "cancelled" not in pred
    assert eid


async def test_schedule_is_checked(conn: asyncpg.Connection) -> None:
    for kw, error in (
        ({"delay_s": 1, "deliver_at": "2030-01-01T00:00:00Z"}, "not both"),
        ({"delay_s": -1}, "delay_s"),
        ({"deliver_at": "tomorrow"}, "deliver_at"),
        ({"hold": "yes"}, "hold"),
    ):
        with pytest.raises(BadInput, match=error):
            await service.enqueue(conn, "t", "{}", **kw)  # type: ignore[arg-type]


async def test_postback_id_is_stable_across_retries_and_rand_is_not(
    conn: asyncpg.Connection, db_url: str, receiver: Receiver
) -> None:
    receiver.routes["/pb"] = sequence(500, 503)
    url = receiver.url("/pb?pb={postback_id}&r={rand}&ms={unix_time_ms}&n={attempt}")
    eid, _ = await add_endpoint(conn, url, method="GET", retry_base_ms=0, retry_cap_ms=0)
    await service.enqueue(conn, "conversion", "{}", "evt_r")
    await drain(db_url)
    got = [_query(r.query) for r in receiver.received]
    assert [g["n"] for g in got] == ["1", "2", "3"]
    assert {g["pb"] for g in got} == {postback_id(eid, "evt_r")}
    assert len({g["r"] for g in got}) == 3
    assert all(g["ms"].isdigit() and len(g["ms"]) == 13 for g in got)


async def test_value_maps_styles_and_defaults_on_the_wire(
    conn: asyncpg.Connection, db_url: str, receiver: Receiver
) -> None:
    vmap = '{"status": {"approved": "1", "pending": "2", "declined": "3"}}'
    await add_endpoint(
        conn, receiver.url("/pb?s=#status#&sub=#sub1|default:none#&raw=#q|raw#"),
        method="GET", macro_style="hash", value_map=vmap,
    )  # fmt: skip
    await service.enqueue(conn, "c", '{"status": "approved", "q": "a%20b&x=1"}', "evt_ok")
    await service.enqueue(conn, "c", '{"status": "chargeback", "q": ""}', "evt_unmapped")
    await drain(db_url)
    [got] = receiver.received
    assert got.query == "s=1&sub=none&raw=a%20b&x=1"
    row = await conn.fetchrow(
        "SELECT status, attempt_count, last_error FROM webhook_queue WHERE event_id = $1",
        "evt_unmapped",
    )
    assert tuple(row) == ("dead_letter", 0, "unmapped value: status")


async def test_a_test_shot_answers_and_stores_nothing(
    conn: asyncpg.Connection, db_url: str, receiver: Receiver
) -> None:
    receiver.routes["/pb"] = bodies('{"success": true, "note": "' + "x" * 3000 + '"}')
    eid, secret = await add_endpoint(conn, receiver.url("/pb?c={click_id}"), method="GET")
    await service.set_enabled(conn, eid, False)  # a disabled endpoint can be tested
    shot = await testshot.send_now(conn, FAST, eid, b'{"click_id": "a b"}')
    assert (shot["sent"], shot["delivered"], shot["status_code"]) == (True, True, 200)
    assert shot["body"].startswith('{"success": true') and len(shot["body"]) == 2048
    assert shot["body_truncated"] is True and shot["url"].endswith("/pb?c=a%20b")
    [got] = receiver.received
    assert got.query == "c=a%20b" and got.headers["webhook-signature"].startswith("v1,")
    missing = await testshot.send_now(conn, FAST, eid, b"{}")
    assert (missing["sent"], missing["error"]) == (False, "missing macro: click_id")
    assert await conn.fetchval("SELECT count(*) FROM webhook_queue") == 0
    assert await conn.fetchval("SELECT count(*) FROM endpoint_latency") == 0
    # Over the API: the same, and another application's credential sees nothing.
    async with admin_api(db_url, FAST) as (http, base):
        async with http.post(f"{base}/v1/endpoints/{eid}/send-test",
                             json={"payload": {"click_id": "z"}}) as r:  # fmt: skip
            doc = orjson.loads(await r.read())
            assert r.status == 200 and doc["status_code"] == 200, doc
        async with http.post(f"{base}/v1/endpoints/999999/send-test", json={}) as r:
            assert r.status == 404
    assert await conn.fetchval("SELECT count(*) FROM webhook_queue") == 0
    assert secret


async def test_auto_disable_after_exactly_n_failures(
    conn: asyncpg.Connection, db_url: str, receiver: Receiver
) -> None:
    receiver.routes["/down"] = status(500)
    eid, _ = await add_endpoint(
        conn, receiver.url("/down"), disable_after=3, disable_within_s=3600, max_in_flight=1,
        retry_base_ms=0, retry_cap_ms=0, max_attempts=20, failure_threshold=100,
    )  # fmt: skip
    other, _ = await add_endpoint(conn, receiver.url("/up"))
    await service.enqueue(conn, "conversion", '{"n": 1}', "evt_a")
    await drain(db_url)
    assert len(receiver.requests_to("/down")) == 3
    assert len(receiver.requests_to("/up")) == 1
    row = await conn.fetchrow(
        "SELECT e.enabled, e.disabled_reason, h.failure_times FROM endpoints e"
        " JOIN endpoint_health h ON h.endpoint_id = e.id WHERE e.id = $1",
        eid,
    )
    assert (row["enabled"], row["disabled_reason"], row["failure_times"]) == (False, "auto", [])
    # Its delivery waits, nothing lost; enabled again, it is judged afresh.
    status_now = await conn.fetchval("SELECT status FROM webhook_queue WHERE endpoint_id = $1", eid)
    assert status_now == "failed"
    assert (await service.get_endpoint(conn, other))["enabled"] is True
    await service.set_enabled(conn, eid, True)
    await drain(db_url)
    assert len(receiver.requests_to("/down")) == 6


async def test_raw_outside_the_query_is_refused(conn: asyncpg.Connection, db_url: str) -> None:
    async with admin_api(db_url, FAST) as (http, base):
        for url in ("https://p.example/{v|raw}?x=1", "https://p.example/pb?x={v|lower}"):
            async with http.post(f"{base}/v1/endpoints", json={"url": url}) as r:
                assert r.status == 400, await r.text()
        body = {"url": "https://p.example/pb?x={v|raw}", "value_map": {"v": {"a": "1"}},
                "disable_after": 10, "disable_within_s": 259200}  # fmt: skip
        async with http.post(f"{base}/v1/endpoints", json=body) as r:
            doc = orjson.loads(await r.read())
            assert r.status == 201, doc
        assert doc["value_map"] == {"v": {"a": "1"}} and doc["disable_after"] == 10
        with contextlib.suppress(KeyError):
            del doc["secret"]
        async with http.patch(f"{base}/v1/endpoints/{doc['id']}",
                              json={"url": "https://p.example/{v|raw}"}) as r:  # fmt: skip
            assert r.status == 400
        async with http.patch(f"{base}/v1/endpoints/{doc['id']}",
                              json={"disable_after": None}) as r:  # fmt: skip
            assert r.status == 400 and "go together" in await r.text()


async def test_a_row_held_past_366_days_is_dead_lettered_by_maintenance(
    conn: asyncpg.Connection, receiver: Receiver
) -> None:
    """Nothing waits forever (issue 32 row 16): a held row no one released
    in 366 days goes to dead letter with its reason; a younger one stays."""
    await add_endpoint(conn, receiver.url("/pb"))
    old = await service.enqueue(conn, "conversion", '{"n": 1}', "evt_old", hold=True)
    await service.enqueue(conn, "conversion", '{"n": 2}', "evt_young", hold=True)
    await conn.execute(
        "UPDATE webhook_queue SET created_at = now() - interval '367 days' WHERE id = $1",
        old["deliveries"][0],
    )
    assert await upkeep.maintain(conn, 86_400.0) is not None
    rows = await conn.fetch("SELECT event_id, status, last_error FROM webhook_queue ORDER BY id")
    assert [tuple(r) for r in rows] == [
        ("evt_old", "dead_letter", "held past 366 days: never released"),
        ("evt_young", "held", None),
    ]
