"""Operational webhooks (SPEC "Operational webhooks"): real rows in the
queue, sent by the normal worker, signed with the ops webhook's own secret,
scoped to the operator or one application, never about themselves."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

import asyncpg
import orjson
import pytest
from standardwebhooks import Webhook

from dispatcher import enqueue
from dispatcher.core.errors import BadInput, Conflict, NotFound, UnknownEndpoint
from dispatcher.core.models import EndpointSpec
from dispatcher.core.signing import generate_secret
from dispatcher.ops import opswebhooks, reports, service, tenancy
from dispatcher.worker.engine import Engine
from tests.helpers import FAST, add_endpoint, admin_api, drain, engine
from tests.receivers import Received, Receiver, sequence, status

# A bound, not a measurement: events arrive within seconds (4 s alone); 20 s
# was once too short beside the whole suite on a slow host.
WAIT_S = 60.0


def events(receiver: Receiver, path: str) -> list[dict[str, Any]]:
    """What arrived at `path`, each verified with the ops webhook's secret."""
    return [orjson.loads(r.body) for r in receiver.requests_to(path)]


def verified(got: Received, secret: str) -> dict[str, Any]:
    h = {k.lower(): v for k, v in got.headers.items()}
    doc: dict[str, Any] = Webhook(secret).verify(got.body, h)
    return doc


async def until(check: Callable[[], bool], timeout: float = WAIT_S) -> None:
    async def wait() -> None:
        while not check():
            await asyncio.sleep(0.02)

    await asyncio.wait_for(wait(), timeout)


@asynccontextmanager
async def running(db_url: str) -> AsyncIterator[Engine]:
    e = engine(db_url)
    task = asyncio.create_task(e.run())
    try:
        yield e
    finally:
        e.stop()
        await asyncio.wait_for(task, 30)


async def ops_webhook(
    conn: asyncpg.Connection, receiver: Receiver, path: str, **kw: Any
) -> tuple[int, str]:
    doc = await opswebhooks.add(conn, receiver.url(path), **kw)
    return doc["id"], doc["secret"]


async def test_a_410_and_a_dead_letter_arrive_signed(
    conn: asyncpg.Connection, db_url: str, receiver: Receiver
) -> None:
    receiver.routes["/gone"] = status(410)
    receiver.routes["/bad"] = status(422)
    ops_id, secret = await ops_webhook(conn, receiver, "/ops")
    gone, _ = await add_endpoint(conn, receiver.url("/gone"), event_types=("g",))
    bad, _ = await add_endpoint(conn, receiver.url("/bad"), event_types=("b",))
    await enqueue(conn, "g", {"n": 1}, "evt-gone")
    await enqueue(conn, "b", {"n": 2}, "evt-bad")
    async with running(db_url):
        await until(lambda: len(receiver.requests_to("/ops")) >= 3)
    got = receiver.requests_to("/ops")
    docs = [verified(g, secret) for g in got]
    by = {(d["type"], d["data"]["endpointId"], d["data"].get("msgId")): d for d in docs}
    disabled = by[("endpoint.disabled", str(gone), None)]
    assert disabled["data"] == {"appId": "default", "endpointId": str(gone), "reason": "gone"}
    assert list(disabled) == ["type", "timestamp", "data"]
    assert disabled["timestamp"].endswith("Z")
    exhausted = by[("message.attempt.exhausted", str(bad), "evt-bad")]
    assert exhausted["data"]["appId"] == "default"
    assert exhausted["data"]["lastAttempt"]["responseStatusCode"] == 422
    # The 410 dead-lettered its delivery too.
    assert ("message.attempt.exhausted", str(gone), "evt-gone") in by
    assert len(docs) == 3
    # Each event's webhook-id is its own and the queue holds them as rows.
    assert len({g.headers["webhook-id"] for g in got}) == 3
    rows = await conn.fetch("SELECT status FROM webhook_queue WHERE endpoint_id = $1", ops_id)
    assert [r["status"] for r in rows] == ["delivered"] * 3


async def test_scope_operator_hears_all_an_application_its_own(
    conn: asyncpg.Connection, db_url: str, receiver: Receiver
) -> None:
    for app in ("acme", "globex"):
        await tenancy.add_application(conn, app)
    receiver.routes["/bad"] = status(400)
    _, op_secret = await ops_webhook(conn, receiver, "/operator")
    _, acme_secret = await ops_webhook(conn, receiver, "/acme", app="acme")
    await ops_webhook(conn, receiver, "/globex", app="globex")
    await ops_webhook(conn, receiver, "/only-created", event_types=["endpoint.created"])
    for app in ("acme", "globex"):
        spec = EndpointSpec(url=receiver.url("/bad"))
        await service.add_endpoint(conn, spec, app=app)
        await enqueue(conn, "t", {}, f"evt-{app}", app=app)
    await drain(db_url)
    acme = [verified(g, acme_secret) for g in receiver.requests_to("/acme")]
    assert {d["data"]["appId"] for d in acme} == {"acme"}
    assert sorted(d["type"] for d in acme) == ["endpoint.created", "message.attempt.exhausted"]
    assert {d["data"]["appId"] for d in events(receiver, "/globex")} == {"globex"}
    operator = [verified(g, op_secret) for g in receiver.requests_to("/operator")]
    assert sorted((d["data"]["appId"], d["type"]) for d in operator) == [
        ("acme", "endpoint.created"),
        ("acme", "message.attempt.exhausted"),
        ("globex", "endpoint.created"),
        ("globex", "message.attempt.exhausted"),
    ]
    assert {d["type"] for d in events(receiver, "/only-created")} == {"endpoint.created"}


async def test_breaker_failing_then_recovered(
    conn: asyncpg.Connection, db_url: str, receiver: Receiver
) -> None:
    receiver.routes["/flaky"] = sequence(500)
    _, secret = await ops_webhook(
        conn, receiver, "/ops", event_types=["message.attempt.failing", "message.attempt.recovered"]
    )
    eid, _ = await add_endpoint(
        conn, receiver.url("/flaky"), failure_threshold=1, cooldown_s=1.0,
        retry_base_ms=0, retry_cap_ms=0,
    )  # fmt: skip
    await enqueue(conn, "t", {}, "evt-flaky")
    async with running(db_url):
        await until(lambda: len(receiver.requests_to("/ops")) >= 2)
    docs = [verified(g, secret) for g in receiver.requests_to("/ops")]
    assert [d["type"] for d in docs] == ["message.attempt.failing", "message.attempt.recovered"]
    assert {d["data"]["endpointId"] for d in docs} == {str(eid)}


async def test_endpoint_changes_are_announced(
    conn: asyncpg.Connection, db_url: str, receiver: Receiver
) -> None:
    _, secret = await ops_webhook(conn, receiver, "/ops")
    doc = await service.add_endpoint(conn, EndpointSpec(url=receiver.url("/x")))
    eid = doc["id"]
    await service.update_endpoint(conn, eid, {"description": "changed"})
    await service.set_enabled(conn, eid, False)
    await service.set_enabled(conn, eid, True)
    await service.delete_endpoint(conn, eid)
    await drain(db_url)
    docs = [verified(g, secret) for g in receiver.requests_to("/ops")]
    assert [(d["type"], d["data"]) for d in docs] == [
        ("endpoint.created", {"appId": "default", "endpointId": str(eid)}),
        ("endpoint.updated", {"appId": "default", "endpointId": str(eid)}),
        ("endpoint.disabled", {"appId": "default", "endpointId": str(eid), "reason": "operator"}),
        ("endpoint.enabled", {"appId": "default", "endpointId": str(eid)}),
        ("endpoint.deleted", {"appId": "default", "endpointId": str(eid)}),
    ]


async def test_ops_webhooks_are_not_endpoints(
    conn: asyncpg.Connection, db_url: str, receiver: Receiver
) -> None:
    await tenancy.add_application(conn, "acme")
    await tenancy.update_application(conn, "acme", {"max_endpoints": 1})
    ops_id, _ = await ops_webhook(conn, receiver, "/ops", app="acme")
    op_id, _ = await ops_webhook(conn, receiver, "/op")
    assert await service.list_endpoints(conn) == []
    assert await service.list_endpoints(conn, "acme") == []
    assert await reports.endpoint_health(conn, 3600.0) == []
    [acme] = [a for a in await tenancy.list_applications(conn) if a["id"] == "acme"]
    assert acme["endpoints"] == 0
    # max_endpoints counts acme's own ops webhooks too (issue 32), never the
    # operator's: at 1, acme's one ops webhook fills it; at 2, room for one.
    spec = EndpointSpec(url=receiver.url("/x"))
    with pytest.raises(Conflict):
        await service.add_endpoint(conn, spec, app="acme", within_quota=True)
    await tenancy.update_application(conn, "acme", {"max_endpoints": 2})
    await service.add_endpoint(conn, spec, app="acme", within_quota=True)
    for oid in (ops_id, op_id):
        with pytest.raises(UnknownEndpoint):
            await service.get_endpoint(conn, oid)
        with pytest.raises(UnknownEndpoint):
            await service.set_enabled(conn, oid, False)
        with pytest.raises(UnknownEndpoint):
            await service.enqueue(conn, "t", {}, endpoint_id=oid)
    # A producer's events never reach an ops webhook, by type or by id.
    assert await enqueue(conn, "endpoint.created", {}, "evt-1") == []
    ids = await conn.fetchval("SELECT dispatcher_enqueue('t', '{}', 'evt-2', $1)", op_id)
    assert ids == []


async def test_an_ops_webhook_failing_causes_no_ops_events(
    conn: asyncpg.Connection, db_url: str, receiver: Receiver
) -> None:
    receiver.routes["/ops-broken"] = status(500)
    receiver.routes["/ops-gone"] = status(410)
    broken = await opswebhooks.add(conn, receiver.url("/ops-broken"))
    await conn.execute(
        "UPDATE endpoints SET max_attempts = 1, failure_threshold = 1 WHERE id = $1", broken["id"]
    )
    await opswebhooks.add(conn, receiver.url("/ops-gone"))
    _, secret = await ops_webhook(conn, receiver, "/ops-ok")
    await service.add_endpoint(conn, EndpointSpec(url=receiver.url("/x")))
    await drain(db_url)
    # One event (endpoint.created) each; the broken one's dead letter, its
    # breaker opening and the gone one's 410 told nobody.
    assert len(receiver.requests_to("/ops-broken")) == 1
    assert len(receiver.requests_to("/ops-gone")) == 1
    [doc] = [verified(g, secret) for g in receiver.requests_to("/ops-ok")]
    assert doc["type"] == "endpoint.created"
    rows = await conn.fetch(
        "SELECT e.url, e.enabled, q.status FROM webhook_queue q JOIN endpoints e"
        " ON e.id = q.endpoint_id WHERE e.kind = 'ops' ORDER BY e.id"
    )
    assert [(r["enabled"], r["status"]) for r in rows] == [
        (True, "dead_letter"),
        (False, "dead_letter"),
        (True, "delivered"),
    ]


async def test_no_ops_webhook_no_emission(
    conn: asyncpg.Connection, db_url: str, receiver: Receiver
) -> None:
    receiver.routes["/bad"] = status(422)
    await add_endpoint(conn, receiver.url("/bad"))
    await enqueue(conn, "t", {}, "evt-1")
    e = await drain(db_url)
    assert await conn.fetchval("SELECT count(*) FROM webhook_queue") == 1
    # outcomes, breakers (3), nothing else
    assert e.stats.dead == 1


async def test_an_ops_webhook_document(conn: asyncpg.Connection, receiver: Receiver) -> None:
    await tenancy.add_application(conn, "acme")
    secret = generate_secret()
    doc = await opswebhooks.add(
        conn, receiver.url("/o"), app="acme", secret=secret,
        event_types=["endpoint.disabled"], description="pager",
    )  # fmt: skip
    assert doc["secret"] == secret
    assert {k: doc[k] for k in ("url", "event_types", "app", "description", "disabled")} == {
        "url": receiver.url("/o"), "event_types": ["endpoint.disabled"], "app": "acme",
        "description": "pager", "disabled": False,
    }  # fmt: skip
    got = await opswebhooks.get(conn, doc["id"], "acme")
    assert "secret" not in got
    with pytest.raises(NotFound):
        await opswebhooks.get(conn, doc["id"], "globex")
    changed = await opswebhooks.update(conn, doc["id"], {"disabled": True, "event_types": []})
    assert (changed["disabled"], changed["event_types"]) == (True, [])
    assert [d["id"] for d in await opswebhooks.list_webhooks(conn, "acme")] == [doc["id"]]
    assert await opswebhooks.list_webhooks(conn, operator_only=True) == []
    assert await opswebhooks.delete(conn, doc["id"]) == {"id": doc["id"], "deleted": True}
    assert await opswebhooks.list_webhooks(conn) == []
    with pytest.raises(BadInput, match="not an operational event type"):
        await opswebhooks.add(conn, receiver.url("/o"), event_types=["order.created"])
    # Signed webhooks only: a broker's URL would skip the tenants' broker
    # allow-list and the sealing of its password; nobody reads a poll: one.
    for url in ("amqp://u:pw@127.0.0.1/?routing_key=q", "redis://127.0.0.1/0?stream=s", "poll:"):
        with pytest.raises(BadInput, match="http:// or https://"):
            await opswebhooks.add(conn, url, app="acme")


async def test_the_admin_api_manages_them_and_announces_endpoint_changes(
    conn: asyncpg.Connection, db_url: str, receiver: Receiver
) -> None:
    await tenancy.add_application(conn, "acme")
    token = (await tenancy.issue_token(conn, "acme"))["token"]
    async with admin_api(db_url, FAST) as (http, base):
        async with http.post(f"{base}/v1/ops-webhooks", json={"url": receiver.url("/op")}) as r:
            assert r.status == 201
            operator = await r.json()
        acme_auth = {"Authorization": f"Bearer {token}"}
        body = {"url": receiver.url("/acme"), "event_types": ["endpoint.updated"]}
        async with http.post(f"{base}/v1/ops-webhooks", json=body, headers=acme_auth) as r:
            assert r.status == 201
            acme = await r.json()
        assert (operator["app"], acme["app"]) == (None, "acme")
        async with http.post(f"{base}/v1/endpoints", json={"url": receiver.url("/x"),
                                                           "app": "acme"}) as r:  # fmt: skip
            assert r.status == 201
            eid = (await r.json())["id"]
        async with http.patch(f"{base}/v1/endpoints/{eid}", json={"name": "x"}) as r:
            assert r.status == 200
        async with http.delete(f"{base}/v1/endpoints/{eid}") as r:
            assert r.status == 200
        async with http.get(f"{base}/v1/ops-webhooks/{operator['id']}", headers=acme_auth) as r:
            assert r.status == 404
        async with http.patch(f"{base}/v1/ops-webhooks/{acme['id']}",
                              json={"event_types": ["order.created"]}) as r:  # fmt: skip
            assert r.status == 400
            assert "not an operational event type" in (await r.json())["error"]
    await drain(db_url)
    op = [verified(g, operator["secret"]) for g in receiver.requests_to("/op")]
    assert [d["type"] for d in op] == ["endpoint.created", "endpoint.updated", "endpoint.deleted"]
    assert {(d["data"]["appId"], d["data"]["endpointId"]) for d in op} == {("acme", str(eid))}
    [updated] = [verified(g, acme["secret"]) for g in receiver.requests_to("/acme")]
    assert updated["type"] == "endpoint.updated"
