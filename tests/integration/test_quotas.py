"""Per-application quotas on a live admin server (SPEC "Limits": `PATCH
/v1/applications/{app}`; past max_endpoints 409, past max_events_per_s 429
with Retry-After). The quota is held by PostgreSQL, so it holds across API
processes; the SQL functions (trusted producers) are not held to it."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import asyncpg
import pytest

from tests.helpers import FAST, TenantApi, admin_api, rows_of, tenant_api

ADMIN = "quota-admin-token"
HOOK = "https://hooks.example/h"


Api = TenantApi


@pytest.fixture
async def api(db_url: str) -> AsyncIterator[Api]:
    async with tenant_api(db_url, ADMIN, ("acme", "globex")) as a:
        yield a


async def queued(conn: asyncpg.Connection, app: str) -> int:
    return await rows_of(conn, app)


EVENT = {"event_type": "order.paid", "payload": {"n": 1}}


# ---------------------------------------------------------------- PATCH /v1/applications/{app}


async def test_patch_sets_and_clears_quotas(api: Api) -> None:
    doc = await api.ok(
        "PATCH", "/v1/applications/acme",
        {"name": "Acme Inc", "max_endpoints": 5, "max_events_per_s": 2.5},
    )  # fmt: skip
    assert doc == {"id": "acme", "name": "Acme Inc", "max_endpoints": 5, "max_events_per_s": 2.5}
    listed = {a["id"]: a for a in await api.ok("GET", "/v1/applications")}
    assert (listed["acme"]["max_endpoints"], listed["acme"]["max_events_per_s"]) == (5, 2.5)
    assert (listed["globex"]["max_endpoints"], listed["globex"]["max_events_per_s"]) == (None, None)
    # A field left out stays; null clears a quota.
    doc = await api.ok("PATCH", "/v1/applications/acme", {"max_endpoints": None})
    assert doc == {"id": "acme", "name": "Acme Inc", "max_endpoints": None, "max_events_per_s": 2.5}
    doc = await api.ok("PATCH", "/v1/applications/acme", {})
    assert doc["max_events_per_s"] == 2.5
    status, err, _ = await api.call("PATCH", "/v1/applications/nope", {"max_endpoints": 1})
    assert status == 404 and "nope" in err["error"]


@pytest.mark.parametrize(
    ("body", "words"),
    [
        ({"max_endpoints": -1}, "max_endpoints must be an integer from 0 to 1000000"),
        ({"max_endpoints": 1_000_001}, "max_endpoints must be an integer from 0 to 1000000"),
        ({"max_endpoints": 1.5}, "max_endpoints"),
        ({"max_endpoints": "5"}, "max_endpoints"),
        ({"max_endpoints": True}, "max_endpoints"),
        ({"max_events_per_s": 0}, "max_events_per_s must be a number from 0.001 to 1000000"),
        ({"max_events_per_s": 0.0009}, "max_events_per_s must be a number from 0.001 to 1000000"),
        ({"max_events_per_s": 1e7}, "max_events_per_s"),
        ({"max_events_per_s": 1e308}, "max_events_per_s"),
        ({"max_endpoints": 2**62}, "max_endpoints"),
        ({"max_events_per_s": "fast"}, "max_events_per_s"),
        ({"name": ""}, "name must be 1-200 characters"),
        ({"name": None}, "name must be 1-200 characters"),
        ({"app": "globex"}, "unknown field: app"),
        ({"event_tokens": 1e9}, "unknown field: event_tokens"),
    ],
    ids=lambda v: str(v)[:40],
)
async def test_patch_refuses_bad_values_naming_field_and_range(
    api: Api, conn: asyncpg.Connection, body: dict[str, Any], words: str
) -> None:
    before = await conn.fetch("SELECT * FROM applications ORDER BY id")
    status, err, _ = await api.call("PATCH", "/v1/applications/acme", body)
    assert status == 400 and words in err["error"], err
    assert await conn.fetch("SELECT * FROM applications ORDER BY id") == before


async def test_patch_is_the_admins_alone(api: Api, conn: asyncpg.Connection) -> None:
    for app in ("acme", "globex"):  # its own application or another's
        status, err, _ = await api.call(
            "PATCH", f"/v1/applications/{app}", {"max_endpoints": 1000}, app="acme"
        )
        assert status == 403 and "globex" not in err["error"]
    async with aiohttp.ClientSession() as anon:
        async with anon.patch(api.base + "/v1/applications/acme", json={"name": "x"}) as r:
            assert r.status == 401
    assert await conn.fetchval("SELECT max_endpoints FROM applications WHERE id = 'acme'") is None
    assert await conn.fetchval("SELECT name FROM applications WHERE id = 'acme'") == "acme"


# ---------------------------------------------------------------- max_endpoints


async def test_max_endpoints_409_at_the_limit_and_room_after_raising(
    api: Api, conn: asyncpg.Connection
) -> None:
    await api.ok("PATCH", "/v1/applications/acme", {"max_endpoints": 2})
    first = await api.ok("POST", "/v1/endpoints", {"url": HOOK}, app="acme")
    await api.ok("POST", "/v1/endpoints", {"url": HOOK, "app": "acme"})  # the admin, naming it
    for app, body in (("acme", {"url": HOOK}), (None, {"url": HOOK, "app": "acme"})):
        status, err, _ = await api.call("POST", "/v1/endpoints", body, app=app)
        assert status == 409, err
        assert "quota of 2 endpoints" in err["error"] and "max_endpoints" in err["error"]
    live = "SELECT count(*) FROM endpoints WHERE application_id = $1 AND deleted_at IS NULL"
    assert await conn.fetchval(live, "acme") == 2
    # Another application, and the default one, are not held to acme's quota.
    for _ in range(3):
        await api.ok("POST", "/v1/endpoints", {"url": HOOK}, app="globex")
        await api.ok("POST", "/v1/endpoints", {"url": HOOK})
    # A deleted endpoint no longer counts.
    await api.ok("DELETE", f"/v1/endpoints/{first['id']}", app="acme")
    await api.ok("POST", "/v1/endpoints", {"url": HOOK}, app="acme")
    assert (await api.call("POST", "/v1/endpoints", {"url": HOOK}, app="acme"))[0] == 409
    await api.ok("PATCH", "/v1/applications/acme", {"max_endpoints": 3})
    await api.ok("POST", "/v1/endpoints", {"url": HOOK}, app="acme")
    assert (await api.call("POST", "/v1/endpoints", {"url": HOOK}, app="acme"))[0] == 409
    await api.ok("PATCH", "/v1/applications/acme", {"max_endpoints": None})
    await api.ok("POST", "/v1/endpoints", {"url": HOOK}, app="acme")
    assert await conn.fetchval(live, "acme") == 4
    await api.ok("PATCH", "/v1/applications/globex", {"max_endpoints": 0})
    assert (await api.call("POST", "/v1/endpoints", {"url": HOOK}, app="globex"))[0] == 409


async def test_concurrent_creates_never_pass_max_endpoints(
    api: Api, conn: asyncpg.Connection
) -> None:
    await api.ok("PATCH", "/v1/applications/acme", {"max_endpoints": 3})
    results = await asyncio.gather(
        *(api.call("POST", "/v1/endpoints", {"url": HOOK}, app="acme") for _ in range(12))
    )
    assert sorted(status for status, _, _ in results) == [201] * 3 + [409] * 9
    count = "SELECT count(*) FROM endpoints WHERE application_id = 'acme'"
    assert await conn.fetchval(count) == 3


# ---------------------------------------------------------------- max_events_per_s


async def test_events_past_the_rate_429_with_retry_after_and_nothing_queued(
    api: Api, conn: asyncpg.Connection
) -> None:
    acme = await api.ok("POST", "/v1/endpoints", {"url": HOOK}, app="acme")
    await api.ok("POST", "/v1/endpoints", {"url": HOOK}, app="globex")
    # 0.01/s: a bucket of 1, refilled in 100 s, so nothing refills during the test.
    await api.ok("PATCH", "/v1/applications/acme", {"max_events_per_s": 0.01})
    await api.ok("POST", "/v1/events", EVENT, app="acme")
    assert await queued(conn, "acme") == 1
    refused = [
        ({**EVENT, "event_id": "e1"}, "acme"),  # its own token
        ({**EVENT, "event_id": "e2", "app": "acme"}, None),  # the admin, naming it
        ({**EVENT, "event_id": "e3", "endpoint": acme["id"]}, None),  # the admin, by endpoint
    ]
    for body, app in refused:
        status, err, headers = await api.call("POST", "/v1/events", body, app=app)
        assert status == 429, err
        assert "max_events_per_s" in err["error"]
        assert 1 <= int(headers["Retry-After"]) <= 100
        assert headers["Retry-After"] in err["error"]
    assert await queued(conn, "acme") == 1
    # Another application is not held to it, nor the default one.
    for n in range(5):
        await api.ok("POST", "/v1/events", {**EVENT, "event_id": f"g{n}"}, app="globex")
        await api.ok("POST", "/v1/events", {**EVENT, "event_id": f"d{n}"})
    assert await queued(conn, "globex") == 5
    # Producers calling the SQL functions are trusted code: not throttled.
    for n in range(5):
        ids = await conn.fetchval(
            "SELECT dispatcher_enqueue_app('acme', 'order.paid', '{}', $1)", f"sql{n}"
        )
        assert len(ids) == 1
    assert await queued(conn, "acme") == 6
    # Raised, the bucket holds more at once; cleared, there is no limit.
    await api.ok("PATCH", "/v1/applications/acme", {"max_events_per_s": 1000})
    await shift_clock(conn, "acme", "-1 second")
    for n in range(20):
        await api.ok("POST", "/v1/events", {**EVENT, "event_id": f"r{n}"}, app="acme")
    await api.ok("PATCH", "/v1/applications/acme", {"max_events_per_s": None})
    for n in range(20):
        await api.ok("POST", "/v1/events", {**EVENT, "event_id": f"c{n}"}, app="acme")
    assert await queued(conn, "acme") == 46


async def test_test_events_count_against_the_events_quota(
    api: Api, conn: asyncpg.Connection
) -> None:
    """A test event is an event: without this, POST …/test floods around the quota."""
    acme = await api.ok("POST", "/v1/endpoints", {"url": HOOK}, app="acme")
    await api.ok("PATCH", "/v1/applications/acme", {"max_events_per_s": 0.01})
    await api.ok("POST", f"/v1/endpoints/{acme['id']}/test", {}, app="acme")
    for app in ("acme", None):
        status, err, headers = await api.call(
            "POST", f"/v1/endpoints/{acme['id']}/test", {}, app=app
        )
        assert status == 429 and "max_events_per_s" in err["error"], err
        assert 1 <= int(headers["Retry-After"]) <= 100
    assert await queued(conn, "acme") == 1


async def shift_clock(conn: asyncpg.Connection, app: str, interval: str) -> None:
    """Moves the bucket's last take by `interval`: into the future, the bucket
    does not refill until real time catches up (a frozen clock); back, as if
    that much time went by."""
    await conn.execute(
        "UPDATE applications SET event_tokens_at ="
        " coalesce(event_tokens_at, statement_timestamp()) + $2::text::interval WHERE id = $1",
        app, interval,
    )  # fmt: skip


async def test_the_bucket_refills_at_the_rate_by_the_database_clock(
    api: Api, conn: asyncpg.Connection
) -> None:
    await api.ok("POST", "/v1/endpoints", {"url": HOOK}, app="acme")
    await api.ok("PATCH", "/v1/applications/acme", {"max_events_per_s": 5})
    sent = 0

    async def post() -> tuple[int, Any]:
        nonlocal sent
        sent += 1
        status, _, headers = await api.call(
            "POST", "/v1/events", {**EVENT, "event_id": f"e{sent}"}, app="acme"
        )
        return status, headers.get("Retry-After")

    await shift_clock(conn, "acme", "1 hour")  # frozen, full: it holds max(1, 5)
    assert [await post() for _ in range(6)] == [(202, None)] * 5 + [(429, "1")]
    # Two seconds later by the database's clock: 5 tokens again (the cap), not 10.
    await shift_clock(conn, "acme", "-1 hour -2 seconds")
    assert await post() == (202, None)  # the refill is counted here ...
    await shift_clock(conn, "acme", "1 hour")  # ... and the clock frozen again
    assert [await post() for _ in range(5)] == [(202, None)] * 4 + [(429, "1")]
    assert await queued(conn, "acme") == 10


async def test_the_quota_holds_across_api_processes(db_url: str, conn: asyncpg.Connection) -> None:
    async with (
        admin_api(db_url, FAST, ADMIN) as (one, base1),
        admin_api(db_url, FAST, ADMIN) as (two, base2),
    ):
        async with one.post(base1 + "/v1/applications", json={"id": "acme"}) as r:
            assert r.status == 201
        async with one.post(base1 + "/v1/endpoints", json={"url": HOOK, "app": "acme"}) as r:
            assert r.status == 201
        async with two.patch(base2 + "/v1/applications/acme", json={"max_events_per_s": 0.01}) as r:
            assert r.status == 200
        async with one.post(base1 + "/v1/events", json={**EVENT, "app": "acme"}) as r:
            assert r.status == 202
        async with two.post(base2 + "/v1/events", json={**EVENT, "app": "acme"}) as r:
            assert r.status == 429 and int(r.headers["Retry-After"]) >= 1
    assert await queued(conn, "acme") == 1
