"""Erasure and payload retention (issue 31, SPEC "History, payloads and
retention"): an event's payload, an application's, and every payload whose
fields hold a person's id, erased at once over /v1, the CLI and the Svix
routes; the rows stay with payload_expired, what was still to be sent is
cancelled, nothing erased is sent, resent or replayed; a tenant erases only
its own; payloads past DISPATCHER_RETENTION_PAYLOAD_S go by themselves."""

from __future__ import annotations

import json
from typing import Any

import asyncpg

from dispatcher.core.retention import Retention
from dispatcher.db import upkeep
from tests.helpers import TenantApi, add_endpoint, cli, drain, tenant_api
from tests.receivers import Receiver

ADMIN = "erasure-admin-token-0123456789abcdef"


async def _world(api: TenantApi) -> dict[str, Any]:
    """acme: two endpoints; globex: one. Events for a person u1 in both,
    u2 and a numeric id in acme."""
    eps: dict[str, list[int]] = {"acme": [], "globex": []}
    for app, n in (("acme", 2), ("globex", 1)):
        for i in range(n):
            doc = await api.ok("POST", "/v1/endpoints",
                               {"url": f"https://{app}.example/{i}", "app": app})  # fmt: skip
            eps[app].append(doc["id"])
    for app, event_id, payload in (
        ("acme", "a-u1", {"user_id": "u1", "amount": 5}),
        ("acme", "a-u2", {"user_id": "u2", "amount": 7}),
        ("acme", "a-n", {"user_id": 42}),
        ("globex", "g-u1", {"user_id": "u1", "nested": {"user_id": "u2"}}),
    ):
        await api.ok("POST", "/v1/events", {"event_type": "t", "payload": payload,
                                            "event_id": event_id, "app": app})  # fmt: skip
    return eps


async def _rows(conn: asyncpg.Connection, event_id: str) -> list[asyncpg.Record]:
    return await conn.fetch(
        "SELECT id, status, payload, payload_erased_at, last_error FROM webhook_queue"
        " WHERE event_id = $1 ORDER BY id",
        event_id,
    )


async def test_an_event_erased_over_v1_keeps_its_rows_and_cancels_what_is_left(
    db_url: str, conn: asyncpg.Connection
) -> None:
    async with tenant_api(db_url, ADMIN, ["acme", "globex"]) as api:
        await _world(api)
        # Another application's event reads as missing, and stays.
        status, _, _ = await api.call("DELETE", "/v1/events/a-u1/content", app="globex")
        assert status == 404
        assert all(r["payload"] is not None for r in await _rows(conn, "a-u1"))

        assert await api.ok("DELETE", "/v1/events/a-u1/content", app="acme") == {"expunged": 1}
        rows = await _rows(conn, "a-u1")
        assert len(rows) == 2
        for r in rows:
            assert r["payload"] is None and r["payload_erased_at"] is not None
            assert (r["status"], r["last_error"]) == ("cancelled", "payload expunged")
        one = await api.ok("GET", f"/v1/deliveries/{rows[0]['id']}", app="acme")
        assert one["payload"] is None and one["payload_expired"] is True
        page = await api.ok("GET", "/v1/deliveries?event_id=a-u1", app="acme")
        assert [d["payload_expired"] for d in page["deliveries"]] == [True, True]

        # Again: nothing left to erase. The other events keep theirs.
        assert await api.ok("DELETE", "/v1/events/a-u1/content") == {"expunged": 0}
        for other in ("a-u2", "a-n", "g-u1"):
            assert all(r["payload"] is not None for r in await _rows(conn, other))
        other = await api.ok("GET", "/v1/deliveries?event_id=a-u2", app="acme")
        assert [d["payload_expired"] for d in other["deliveries"]] == [False, False]


async def test_payload_contains_erases_one_persons_payloads_within_the_callers_scope(
    db_url: str, conn: asyncpg.Connection
) -> None:
    async with tenant_api(db_url, ADMIN, ["acme", "globex"]) as api:
        await _world(api)
        # An application's own call: its own events only, whatever it names.
        status, _, _ = await api.call(
            "POST", "/v1/expunge", {"payload_contains": {"user_id": "u1"}, "app": "globex"},
            app="acme",
        )  # fmt: skip
        assert status == 403
        got = await api.ok("POST", "/v1/expunge", {"payload_contains": {"user_id": "u1"}},
                           app="acme")  # fmt: skip
        assert got == {"expunged": 1}
        assert all(r["payload"] is None for r in await _rows(conn, "a-u1"))
        assert all(r["payload"] is not None for r in await _rows(conn, "g-u1"))
        # Top-level fields only (globex's nested u2 stays), JSON values
        # compared as JSON (42 is not "42").
        assert await api.ok("POST", "/v1/expunge", {"payload_contains": {"user_id": "42"}}) == {
            "expunged": 0
        }
        assert await api.ok("POST", "/v1/expunge", {"payload_contains": {"user_id": 42.0}}) == {
            "expunged": 1
        }
        # The admin without app: every application.
        got = await api.ok("POST", "/v1/expunge", {"payload_contains": {"user_id": "u1"}})
        assert got == {"expunged": 1}  # globex's; acme's went already
        assert all(r["payload"] is not None for r in await _rows(conn, "a-u2"))
        for body in ({}, {"payload_contains": {}}, {"payload_contains": ["user_id"]}):
            status, doc, _ = await api.call("POST", "/v1/expunge", body)
            assert status == 400, doc


async def test_an_applications_payloads_before_a_time(
    db_url: str, conn: asyncpg.Connection
) -> None:
    async with tenant_api(db_url, ADMIN, ["acme", "globex"]) as api:
        await _world(api)
        await conn.execute(
            "UPDATE webhook_queue SET created_at = now() - interval '2 days'"
            " WHERE event_id IN ('a-u1', 'g-u1')"
        )
        status, _, _ = await api.call("POST", "/v1/applications/globex/expunge", {}, app="acme")
        assert status == 403
        before = {"before": "2000-01-01T00:00:00Z"}
        assert await api.ok("POST", "/v1/applications/acme/expunge", before, app="acme") == {
            "expunged": 0
        }
        day_ago = await conn.fetchval("SELECT (now() - interval '1 day')::text")
        got = await api.ok("POST", "/v1/applications/acme/expunge",
                           {"before": day_ago.replace(" ", "T")}, app="acme")  # fmt: skip
        assert got == {"expunged": 1}
        assert all(r["payload"] is None for r in await _rows(conn, "a-u1"))
        assert all(r["payload"] is not None for r in await _rows(conn, "g-u1"))
        assert all(r["payload"] is not None for r in await _rows(conn, "a-u2"))
        status, _, _ = await api.call("POST", "/v1/applications/nosuch/expunge", {})
        assert status == 404


async def test_the_cli_erases_an_event_and_an_application(
    db_url: str, conn: asyncpg.Connection
) -> None:
    async with tenant_api(db_url, ADMIN, ["acme", "globex"]) as api:
        await _world(api)
    code, out, err = await cli(db_url, "event", "expunge", "a-u2", "--app", "acme", "--json")
    assert (code, json.loads(out)) == (0, {"expunged": 1}), err
    code, out, err = await cli(db_url, "event", "expunge", "a-u2", "--app", "acme")
    assert code == 0 and "0 event payloads erased" in out, err
    code, out, err = await cli(db_url, "event", "expunge", "nosuch")
    assert code != 0 and out == "" and len(err.strip().splitlines()) == 1, err
    code, out, err = await cli(
        db_url, "app", "expunge", "acme", "--payload-contains", "user_id=42", "--json"
    )
    assert (code, json.loads(out)) == (0, {"expunged": 1}), err
    code, out, err = await cli(db_url, "app", "expunge", "globex")
    assert code == 0 and "1 event payload erased" in out, err
    code, _, err = await cli(db_url, "app", "expunge", "acme", "--before", "yesterday")
    assert code == 2 and "before must be an ISO-8601 time" in err, err
    left = await conn.fetch("SELECT DISTINCT event_id FROM webhook_queue WHERE payload IS NOT NULL")
    assert [r["event_id"] for r in left] == ["a-u1"]


async def test_nothing_erased_is_replayed_resent_or_sent(
    db_url: str, conn: asyncpg.Connection, receiver: Receiver
) -> None:
    await add_endpoint(conn, receiver.url("/r"))
    await conn.execute("SELECT dispatcher_enqueue('t', '{\"k\": 1}'::jsonb, 'dead-one')")
    await conn.execute("SELECT dispatcher_enqueue('t', '{\"k\": 2}'::jsonb, 'on-the-wire')")
    await conn.execute(
        "UPDATE webhook_queue SET status = CASE event_id WHEN 'dead-one' THEN 'dead_letter'"
        " ELSE 'in_flight' END, attempt_count = 1, next_attempt_at = now() - interval '1 s'"
    )
    # An erasure while a row is on the wire leaves its status to the worker.
    code, out, err = await cli(db_url, "event", "expunge", "on-the-wire", "--json")
    assert (code, json.loads(out)) == (0, {"expunged": 1}), err
    code, out, err = await cli(db_url, "event", "expunge", "dead-one", "--json")
    assert (code, json.loads(out)) == (0, {"expunged": 1}), err
    [dead_id] = [r["id"] for r in await _rows(conn, "dead-one")]
    code, out, err = await cli(db_url, "dlq", "replay", "--id", str(dead_id), "--json")
    assert code == 0, err
    assert (await _rows(conn, "dead-one"))[0]["status"] == "dead_letter"
    await drain(db_url)  # the row on the wire's lease ran out: claimed again
    [wire] = await _rows(conn, "on-the-wire")
    assert (wire["status"], wire["last_error"]) == ("dead_letter", "payload expunged")
    assert receiver.received == []


async def test_svix_routes_erase_and_refuse_a_resend(db_url: str, conn: asyncpg.Connection) -> None:
    async with tenant_api(db_url, ADMIN, ["acme"]) as api:
        await api.ok("POST", "/v1/endpoints", {"url": "https://acme.example/0", "app": "acme"})
        svix_ep = (await api.ok("GET", "/api/v1/app/acme/endpoint"))["data"][0]["id"]
        for i in range(3):
            await api.ok("POST", "/api/v1/app/acme/msg",
                         {"eventType": "t", "payload": {"i": i}, "eventId": f"m{i}"})  # fmt: skip
        status, _, _ = await api.call("DELETE", "/api/v1/app/acme/msg/m0/content")
        assert status == 204
        msg = await api.ok("GET", "/api/v1/app/acme/msg/m0")
        assert msg["payload"] == {}
        status, _, _ = await api.call(
            "POST", f"/api/v1/app/acme/msg/m0/endpoint/{svix_ep}/resend", {}
        )
        assert status == 409
        status, _, _ = await api.call("DELETE", "/api/v1/app/acme/msg/nosuch/content")
        assert status == 404
        got = await api.ok("POST", "/api/v1/app/acme/msg/bulk-expunge", {"ids": ["m1", "zz"]})
        assert got == {"results": {"m1": "expunged", "zz": "not-found"}}
        task = await api.ok("POST", "/api/v1/app/acme/msg/expunge-all-contents")
        assert task["status"] == "finished" and task["task"] == "application.purge_content"
        assert task["data"] == {"messagesPurged": 1}
    left = await conn.fetchval(
        "SELECT count(*) FROM messages WHERE payload IS NOT NULL OR payload_erased_at IS NULL"
    )
    assert left == 0
    assert await conn.fetchval("SELECT count(*) FROM webhook_queue WHERE payload IS NOT NULL") == 0


async def test_payloads_past_their_retention_go_and_the_rows_stay(conn: asyncpg.Connection) -> None:
    await add_endpoint(conn, "https://keep.example/r")
    await conn.execute("INSERT INTO applications (id, name) VALUES ('acme', 'Acme')")
    for event_id, status, age in (
        ("old-delivered", "delivered", "3 hours"),
        ("old-dead", "dead_letter", "3 hours"),
        ("old-retrying", "failed", "3 hours"),  # still to be sent: keeps it
        ("new-delivered", "delivered", "1 minute"),
    ):
        await conn.execute("SELECT dispatcher_enqueue('t', '{}'::jsonb, $1)", event_id)
        await conn.execute(
            "UPDATE webhook_queue SET status = $2, created_at = now() - $3::text::interval,"
            " updated_at = now(), delivered_at = now() WHERE event_id = $1",
            event_id, status, age,
        )  # fmt: skip
        await conn.execute(
            "INSERT INTO messages (application_id, id, event_type, payload, created_at)"
            " VALUES ('acme', $1, 't', '{}', now() - $2::text::interval)",
            event_id, age,
        )  # fmt: skip
    # Rows kept for ever, payloads for two hours.
    keep = Retention(delivered_s=0, dead_s=0, cancelled_s=0, messages_s=0, payload_s=7200)
    assert await upkeep.maintain(conn, 86400.0, keep) is not None
    rows = {r["event_id"]: r for r in await conn.fetch("SELECT * FROM webhook_queue")}
    assert len(rows) == 4
    erased = {e for e, r in rows.items() if r["payload"] is None}
    assert erased == {"old-delivered", "old-dead"}
    assert all(rows[e]["payload_erased_at"] is not None for e in erased)
    gone = await conn.fetch("SELECT id FROM messages WHERE payload IS NULL ORDER BY id")
    assert [r["id"] for r in gone] == ["old-dead", "old-delivered", "old-retrying"]
    # The defaults: every final row is deleted before its payload expires,
    # so nothing is erased that is not deleted.
    assert Retention().payloads_outlive_rows() is False
