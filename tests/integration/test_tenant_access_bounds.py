"""What an application's own credential may not reach (issue 32, rows 6, 7
and 13; SPEC "Limits"), from the outside: the admin API in-process on a real
PostgreSQL, real receivers, the worker drained in-process, two or more
applications.

- Row 6: a tenant may change its metadata, never its uid or name, so it
  cannot take a future customer's uid (and with it, through the operator's
  get-or-create, that customer's messages) or another tenant's name.
- Row 7: portal codes an application token minted expire no later than
  the token and die with it, and so do the sessions they opened; 1 h by
  default, 7 days at most; a portal session mints none; the operator can
  end every code and session of an application at once.
- Row 13: the operator's ops webhooks live in application `default` but
  their deliveries are no tenant's: a `default` token neither reads nor
  cancels nor replays them; the operator still does.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import aiohttp
import asyncpg
import pytest

from dispatcher import db
from dispatcher.ops import tenancy
from dispatcher.web.security import CSRF_HEADER, PORTAL_COOKIE
from tests.helpers import FAST, admin_api, cli, drain
from tests.receivers import Receiver
from tests.releases import build_release

ADMIN = "bounds-admin-token"
A, B = "tenant-a", "tenant-b"


@dataclass
class Api:
    http: aiohttp.ClientSession
    base: str

    async def call(
        self, method: str, path: str, body: Any = None, *, token: str | None = ADMIN,
        headers: dict[str, str] | None = None,
    ) -> tuple[int, Any]:  # fmt: skip
        hdrs = dict(headers or {})
        if token is not None:
            hdrs["Authorization"] = f"Bearer {token}"
        async with self.http.request(
            method, self.base + path, json=body, headers=hdrs, allow_redirects=False
        ) as r:
            text = await r.text()
            return r.status, (json.loads(text) if text else None)

    async def ok(self, method: str, path: str, body: Any = None, **kw: Any) -> Any:
        status, doc = await self.call(method, path, body, **kw)
        assert status < 300, (method, path, status, doc)
        return doc

    async def token(self, app: str, ttl_s: float | None = None) -> str:
        body = {} if ttl_s is None else {"ttl_s": ttl_s}
        doc = await self.ok("POST", f"/v1/applications/{app}/tokens", body)
        return str(doc["token"])

    async def sign_in(self, url: str) -> str | None:
        """The portal session cookie a link's code gives, or None (refused)."""
        async with self.http.get(url, allow_redirects=False) as r:
            if r.status != 303:
                assert r.status == 401, r.status
                return None
            return r.cookies[PORTAL_COOKIE].value

    async def as_session(self, sid: str, method: str = "GET", path: str = "/v1/endpoints",
                         body: Any = None) -> tuple[int, Any]:  # fmt: skip
        headers = {"Cookie": f"{PORTAL_COOKIE}={sid}", CSRF_HEADER: tenancy.csrf_for(sid)}
        return await self.call(method, path, body, token=None, headers=headers)


@pytest.fixture
async def api(db_url: str) -> AsyncIterator[Api]:
    # Cookies go by hand: one client acts as several browsers.
    async with (
        admin_api(db_url, FAST, ADMIN) as (_, base),
        aiohttp.ClientSession(cookie_jar=aiohttp.DummyCookieJar()) as http,
    ):
        api = Api(http, base)
        for app in (A, B):
            await api.ok("POST", "/v1/applications", {"id": app, "name": app.title()})
        yield api


async def _app_row(conn: asyncpg.Connection, app: str) -> asyncpg.Record:
    row = await conn.fetchrow("SELECT id, uid, name, metadata FROM applications WHERE id = $1", app)
    assert row is not None
    return row


# ---------------------------------------------------------------- row 6


async def test_a_tenant_changes_its_metadata_never_its_uid_or_name(
    api: Api, conn: asyncpg.Connection, db_url: str, receiver: Receiver
) -> None:
    token = await api.token(A)
    before = await _app_row(conn, A)
    for body in ({"uid": "future-customer"}, {"name": "Tenant-B"}, {"uid": None, "name": "X"},
                 {"uid": "future-customer", "metadata": {"plan": "gold"}}):  # fmt: skip
        status, doc = await api.call("PATCH", f"/api/v1/app/{A}", body, token=token)
        assert status == 403, (body, doc)
        assert doc["code"] == "forbidden" and "uid or name" in doc["detail"], doc
    assert await _app_row(conn, A) == before, "a refused change changed the row"
    # Metadata is the tenant's; its own name and uid sent back unchanged are no change.
    doc = await api.ok("PATCH", f"/api/v1/app/{A}", {"metadata": {"plan": "gold"}}, token=token)
    assert doc["metadata"] == {"plan": "gold"}
    doc = await api.ok("PATCH", f"/api/v1/app/{A}",
                       {"name": before["name"], "uid": None, "metadata": {"p": "1"}},
                       token=token)  # fmt: skip
    assert doc["metadata"] == {"p": "1"} and doc["name"] == before["name"]
    # The operator still changes everything.
    doc = await api.ok("PATCH", f"/api/v1/app/{B}", {"name": "Renamed", "uid": "b-uid"})
    assert (doc["name"], doc["uid"]) == ("Renamed", "b-uid")

    # A's endpoint; then the operator's get-or-create for the new customer's
    # uid makes a new application, not A's, and its message goes there only.
    await api.ok("POST", f"/api/v1/app/{A}/endpoint", {"url": receiver.url("/a")}, token=token)
    status, made = await api.call(
        "POST", "/api/v1/app?get_if_exists=true", {"name": "Future", "uid": "future-customer"}
    )
    assert status == 201 and made["id"] != A, made
    await api.ok("POST", f"/api/v1/app/{made['id']}/endpoint", {"url": receiver.url("/future")})
    await api.ok("POST", "/api/v1/app/future-customer/msg",
                 {"eventType": "invoice.paid", "payload": {"card": "4242-SECRET"}})  # fmt: skip
    await drain(db_url)
    assert len(receiver.requests_to("/future")) == 1
    assert receiver.requests_to("/a") == []
    assert (await _app_row(conn, A))["name"] == before["name"]


# ---------------------------------------------------------------- row 7


async def _code_expiry(conn: asyncpg.Connection, code: str) -> datetime:
    at = await conn.fetchval(
        "SELECT expires_at FROM portal_codes WHERE code_hash = $1", tenancy.digest(code)
    )
    assert isinstance(at, datetime)
    return at


async def _mint(api: Api, token: str, app: str = A, **body: Any) -> dict[str, Any]:
    doc: dict[str, Any] = await api.ok(
        "POST", f"/api/v1/auth/app-portal-access/{app}", body, token=token
    )
    return doc


async def test_portal_codes_and_sessions_die_with_the_token_that_minted_them(
    api: Api, conn: asyncpg.Connection
) -> None:
    # Revoked: an unused code no longer signs in; a session it opened ends.
    token = await api.token(A)
    unused = await _mint(api, token)
    sid = await api.sign_in((await _mint(api, token))["url"])
    assert sid is not None and (await api.as_session(sid))[0] == 200
    operator_sid = await api.sign_in(
        (await api.ok("POST", f"/v1/applications/{A}/portal-links", {}))["url"]
    )
    assert operator_sid is not None
    await tenancy.revoke_token(conn, token)
    assert await api.sign_in(unused["url"]) is None
    assert (await api.as_session(sid))[0] == 401
    # The operator's link answers to no token: its session goes on.
    assert (await api.as_session(operator_sid))[0] == 200

    # Expiring: the code expires with the token however long it asked for,
    # and the session it opened ends then too.
    short = await api.token(A, ttl_s=3)
    token_expiry = await conn.fetchval(
        "SELECT expires_at FROM application_tokens WHERE token_hash = $1", tenancy.digest(short)
    )
    later = await _mint(api, short, expiry=7 * 86_400)
    assert await _code_expiry(conn, later["token"]) <= token_expiry
    sid = await api.sign_in((await _mint(api, short, expiry=3600))["url"])
    assert sid is not None and (await api.as_session(sid))[0] == 200
    await asyncio.sleep(max(0.0, (token_expiry - datetime.now(UTC)).total_seconds()) + 0.5)
    assert (await api.as_session(sid))[0] == 401
    assert await api.sign_in(later["url"]) is None


async def test_portal_expiry_defaults_to_an_hour_and_is_at_most_seven_days(
    api: Api, conn: asyncpg.Connection
) -> None:
    token = await api.token(A)
    started = time.time()
    doc = await _mint(api, token)
    left = (await _code_expiry(conn, doc["token"])).timestamp() - started
    assert 3500 < left <= 3601, left
    doc = await _mint(api, token, expiry=7 * 86_400)
    assert (await _code_expiry(conn, doc["token"])).timestamp() - started <= 7 * 86_400 + 1
    codes = await conn.fetchval("SELECT count(*) FROM portal_codes")
    for expiry in (7 * 86_400 + 1, 10 * 365 * 86_400, 0, -5, "long", True):
        status, err = await api.call(
            "POST", f"/api/v1/auth/app-portal-access/{A}", {"expiry": expiry}, token=token
        )
        assert status == 422 and err["code"] == "validation", (expiry, err)
        assert "expiry must be a number between 1 and 604800" in err["detail"][0]["msg"]
    # The operator's own links: the same bounds, in /v1/'s shape.
    status, err = await api.call(
        "POST", f"/v1/applications/{A}/portal-links", {"ttl_s": 30 * 86_400}
    )
    assert status == 400 and "ttl_s must be a number between 1 and 604800" in err["error"]
    assert await conn.fetchval("SELECT count(*) FROM portal_codes") == codes, "nothing minted"


async def test_a_portal_session_cannot_mint_portal_access(
    api: Api, conn: asyncpg.Connection
) -> None:
    link = await api.ok("POST", f"/v1/applications/{A}/portal-links", {})
    sid = await api.sign_in(link["url"])
    assert sid is not None
    codes = await conn.fetchval("SELECT count(*) FROM portal_codes")
    status, doc = await api.as_session(sid, "POST", f"/api/v1/auth/app-portal-access/{A}", {})
    assert status == 403 and doc["code"] == "forbidden", doc
    assert await conn.fetchval("SELECT count(*) FROM portal_codes") == codes
    # The session itself still works: refusing to mint is not signing out.
    assert (await api.as_session(sid))[0] == 200


async def test_revoke_portal_ends_every_code_and_session_of_one_application(
    api: Api, conn: asyncpg.Connection, db_url: str
) -> None:
    token = await api.token(A)

    async def link(app: str) -> str:
        return str((await api.ok("POST", f"/v1/applications/{app}/portal-links", {}))["url"])

    sessions = [
        await api.sign_in(await link(A)),
        await api.sign_in((await _mint(api, token))["url"]),
    ]
    waiting = [await link(A), (await _mint(api, token))["url"]]
    theirs = await api.sign_in(await link(B))
    assert None not in sessions and theirs is not None

    # An application's token may not call it, even for itself.
    status, doc = await api.call("POST", f"/v1/applications/{A}/revoke-portal", token=token)
    assert status == 403, doc
    doc = await api.ok("POST", f"/v1/applications/{A}/revoke-portal")
    assert doc == {"app": A, "codes": 2, "sessions": 2}
    for sid in sessions:
        assert sid is not None and (await api.as_session(sid))[0] == 401
    for url in waiting:
        assert await api.sign_in(url) is None
    assert (await api.as_session(theirs))[0] == 200, "another application's session ended"
    status, doc = await api.call("POST", "/v1/applications/no-such-app/revoke-portal")
    assert status == 404, doc

    # The command: the same, and its counts as JSON.
    sid = await api.sign_in(await link(A))
    code, out, err = await cli(db_url, "app", "revoke-portal", A, "--json")
    assert code == 0, err
    assert json.loads(out) == {"app": A, "codes": 0, "sessions": 1}
    assert sid is not None and (await api.as_session(sid))[0] == 401
    code, out, err = await cli(db_url, "app", "revoke-portal", "no-such-app")
    assert code == 2 and err.strip().count("\n") == 0 and "no-such-app" in err, (out, err)


# ---------------------------------------------------------------- row 13


async def test_the_operators_ops_deliveries_are_no_tenants(
    api: Api, conn: asyncpg.Connection, receiver: Receiver
) -> None:
    """Ops events are queued, never sent (no worker): they stay cancellable."""
    operator = await api.ok("POST", "/v1/ops-webhooks", {"url": receiver.url("/operator")})
    own = await api.ok("POST", "/v1/ops-webhooks", {"url": receiver.url("/own"), "app": "default"})
    token = await api.token("default")
    # Another tenant's endpoint: the operator's ops webhook hears of it.
    await api.ok("POST", "/v1/endpoints", {"url": "https://b.example/hook", "app": B})
    # Default's own endpoint: both the operator's and default's own ops
    # webhooks hear of it, under one event id.
    await api.ok("POST", "/v1/endpoints", {"url": "https://d.example/hook"}, token=token)
    rows = await conn.fetch(
        "SELECT id, endpoint_id, event_id, payload::text AS payload FROM webhook_queue"
        " WHERE endpoint_id = ANY($1::bigint[]) ORDER BY id",
        [operator["id"], own["id"]],
    )
    ops_rows = [r for r in rows if r["endpoint_id"] == operator["id"]]
    own_rows = [r for r in rows if r["endpoint_id"] == own["id"]]
    assert len(ops_rows) == 2 and len(own_rows) == 1, rows
    about_b = next(r for r in ops_rows if f'"appId": "{B}"' in r["payload"]
                   or f'"appId":"{B}"' in r["payload"])  # fmt: skip
    shared = own_rows[0]["event_id"]
    assert any(r["event_id"] == shared for r in ops_rows)
    operator_ids = {r["id"] for r in ops_rows}

    # Reads: the browser, one delivery, one event's deliveries, dead letters.
    listed = await api.ok("GET", "/v1/deliveries", token=token)
    ids = {d["id"] for d in listed["deliveries"]}
    assert own_rows[0]["id"] in ids and not ids & operator_ids, listed
    assert B not in json.dumps(listed)
    status, _ = await api.call("GET", f"/v1/deliveries/{about_b['id']}", token=token)
    assert status == 404
    by_event = await api.ok("GET", f"/v1/deliveries?event_id={shared}", token=token)
    assert {d["id"] for d in by_event["deliveries"]} == {own_rows[0]["id"]}
    theirs = await api.ok("GET", f"/v1/deliveries?event_id={about_b['event_id']}", token=token)
    assert theirs["deliveries"] == []
    await conn.execute(
        "UPDATE webhook_queue SET status = 'dead_letter', last_error = 'HTTP 500'"
        " WHERE id = ANY($1::bigint[])",
        list(operator_ids),
    )
    dead = await api.ok("GET", "/v1/dead-letters", token=token)
    assert not {d["id"] for d in dead} & operator_ids, dead
    assert B not in json.dumps(dead)
    # Replays: by id and since a time leave them dead.
    await api.call("POST", "/v1/dead-letters/replay", {"ids": list(operator_ids)}, token=token)
    await api.call("POST", "/v1/dead-letters/replay", {"since": "2000-01-01T00:00:00Z"},
                   token=token)  # fmt: skip
    statuses = await conn.fetch(
        "SELECT status FROM webhook_queue WHERE id = ANY($1::bigint[])", list(operator_ids)
    )
    assert {r["status"] for r in statuses} == {"dead_letter"}

    # Cancel: back to pending, then a tenant's cancel leaves them alone.
    await conn.execute(
        "UPDATE webhook_queue SET status = 'pending' WHERE id = ANY($1::bigint[])",
        list(operator_ids),
    )
    status, doc = await api.call("POST", f"/v1/events/{about_b['event_id']}/cancel", {},
                                 token=token)  # fmt: skip
    assert status == 404, doc
    doc = await api.ok("POST", f"/v1/events/{shared}/cancel", {}, token=token)
    assert doc["cancelled"] == [own_rows[0]["id"]]
    statuses = await conn.fetch(
        "SELECT status FROM webhook_queue WHERE id = ANY($1::bigint[])", list(operator_ids)
    )
    assert {r["status"] for r in statuses} == {"pending"}

    # The operator, with the admin token, still sees and cancels them.
    everything = await api.ok("GET", "/v1/deliveries")
    assert operator_ids <= {d["id"] for d in everything["deliveries"]}
    assert (await api.ok("GET", f"/v1/deliveries/{about_b['id']}"))["id"] == about_b["id"]
    doc = await api.ok("POST", f"/v1/events/{about_b['event_id']}/cancel", {})
    assert doc["cancelled"] == [about_b["id"]]


# ---------------------------------------------------------------- the migration


async def test_migration_018_keeps_codes_and_sessions_made_before_it(empty_db_url: str) -> None:
    """At 017 with a live code, a session and a queued event: after 018 the
    code still signs in (it answers to no token, as every older one), the
    session still acts, and a producer's two-argument cancel still works."""
    conn = await asyncpg.connect(empty_db_url)
    try:
        await build_release(conn, 17)
        code, sid = "old-code", "old-session"
        await conn.execute(
            "INSERT INTO portal_codes (code_hash, application_id, expires_at)"
            " VALUES ($1, 'default', now() + interval '1 hour')",
            tenancy.digest(code),
        )
        await conn.execute(
            "INSERT INTO portal_sessions (session_hash, application_id, expires_at)"
            " VALUES ($1, 'default', now() + interval '1 hour')",
            tenancy.digest(sid),
        )
        await conn.execute(
            "INSERT INTO endpoints (url, secret) VALUES ('https://a.example/1', 'whsec_x')"
        )
        [queued] = await conn.fetchval("SELECT dispatcher_enqueue('t', '{}', 'e1')")

        assert (await db.migrate(conn))[0] == "018_portal_bounds.sql"

        assert await tenancy.session_application(conn, sid) == "default"
        assert await tenancy.redeem_code(conn, code) == ("default", None)
        assert await conn.fetchval("SELECT dispatcher_cancel_event('default', 'e1')") == [queued]
        assert await db.migrate(conn) == []
    finally:
        await conn.close()
