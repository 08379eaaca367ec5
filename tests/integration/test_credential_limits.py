"""Issue 21 on a real admin server: failed credentials throttled per client
address, `HEAD` leaving portal codes alone, and list routes capping `limit`.

SPEC ("Limits: what one application may set, send or provoke"): past 20
failures in a minute the answer is 429 with `Retry-After`, and a correct
credential from another address is unaffected; `HEAD` on `/portal/login`
does not spend the code; list routes cap `limit` at 1000.

The other address is 127.0.0.2: the whole of 127.0.0.0/8 is loopback on
Linux, so a client socket bound there reaches the server on 127.0.0.1.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, replace
from typing import Any

import aiohttp
import asyncpg
import pytest
from aiohttp import web

from dispatcher.web.admin import start_admin
from dispatcher.web.security import PORTAL_COOKIE
from tests.helpers import FAST

TOKEN = "limits-admin-token"
ADMIN = {"Authorization": f"Bearer {TOKEN}"}
WRONG = {"Authorization": "Bearer dtk_not-a-token"}
APP = "acme"
OPERATOR = "127.0.0.9"  # where the operator's own calls come from


@dataclass
class Server:
    base: str
    app_token: str

    async def link(self) -> str:
        """A fresh one-time portal sign-in link for APP, asked for from an
        address of its own (the test's may be locked out by then)."""
        path = f"{self.base}/v1/applications/{APP}/portal-links"
        async with _from(OPERATOR) as s, s.post(path, json={}, headers=ADMIN) as r:
            assert r.status == 201, await r.text()
            return str((await r.json())["url"])


@asynccontextmanager
async def _server(db_url: str, **overrides: Any) -> AsyncIterator[Server]:
    settings = replace(FAST, admin_token=TOKEN, **overrides)
    runner: web.BaseRunner = await start_admin("127.0.0.1:0", settings, db_url, quiet=True)
    host, port = runner.addresses[0][:2]
    base = f"http://{host}:{port}"
    try:
        async with aiohttp.ClientSession(headers=ADMIN) as s:
            async with s.post(f"{base}/v1/applications", json={"id": APP}) as r:
                assert r.status == 201, await r.text()
            async with s.post(f"{base}/v1/applications/{APP}/tokens", json={}) as r:
                assert r.status == 201, await r.text()
                token = str((await r.json())["token"])
        yield Server(base, token)
    finally:
        await runner.cleanup()


@pytest.fixture
async def server(db_url: str) -> AsyncIterator[Server]:
    async with _server(db_url) as s:  # the default limit: 20 a minute
        yield s


def _from(address: str) -> aiohttp.ClientSession:
    """A client whose connections leave from `address`; cookies kept by hand."""
    connector = aiohttp.TCPConnector(local_addr=(address, 0), force_close=True)
    return aiohttp.ClientSession(connector=connector, cookie_jar=aiohttp.DummyCookieJar())


def _retry_after(r: aiohttp.ClientResponse) -> int:
    value = r.headers["Retry-After"]
    assert value.isdigit(), value
    seconds = int(value)
    assert 1 <= seconds <= 60, seconds
    return seconds


async def _locked(r: aiohttp.ClientResponse) -> None:
    assert r.status == 429, (r.status, await r.text())
    _retry_after(r)
    assert "too many failed" in (await r.json())["error"]


# ---------------------------------------------------------------- throttling


async def test_wrong_bearer_tokens_lock_out_their_address_only(server: Server) -> None:
    async with _from("127.0.0.1") as here, _from("127.0.0.2") as there:
        for i in range(20):
            async with here.get(f"{server.base}/v1/endpoints", headers=WRONG) as r:
                assert r.status == 401, (i, r.status)
        async with here.get(f"{server.base}/v1/endpoints", headers=WRONG) as r:
            await _locked(r)
        # The other address: both a right admin token and a right
        # application token still work, and so does a wrong one (a 401).
        async with there.get(f"{server.base}/v1/endpoints", headers=ADMIN) as r:
            assert r.status == 200, await r.text()
        bearer = {"Authorization": f"Bearer {server.app_token}"}
        async with there.get(f"{server.base}/v1/endpoints", headers=bearer) as r:
            assert r.status == 200, await r.text()
        async with there.get(f"{server.base}/v1/endpoints", headers=WRONG) as r:
            assert r.status == 401
        # The locked-out address: even the right token (it could be the
        # guess that works), and a header claiming another client does not help.
        for headers in (ADMIN, bearer, {**WRONG, "X-Forwarded-For": "198.51.100.9"}):
            async with here.get(f"{server.base}/v1/health", headers=headers) as r:
                await _locked(r)
        # Still a plain 200 for what needs no credential.
        async with here.get(f"{server.base}/healthz") as r:
            assert r.status == 200


async def test_wrong_portal_codes_and_sign_ins_count_together(server: Server) -> None:
    login = f"{server.base}/login"
    async with _from("127.0.0.1") as here, _from("127.0.0.2") as there:
        for i in range(10):
            async with here.get(f"{server.base}/portal/login?code=guess{i}") as r:
                assert r.status == 401, (i, r.status)
            async with here.post(login, data={"token": f"guess{i}"}) as r:
                assert r.status == 401, (i, r.status)
        link = await server.link()
        async with here.get(link, allow_redirects=False) as r:
            await _locked(r)
        async with here.post(login, data={"token": TOKEN}, allow_redirects=False) as r:
            await _locked(r)
        # The locked-out attempt spent nothing: the link works from elsewhere.
        async with there.get(link, allow_redirects=False) as r:
            assert r.status == 303, await r.text()
            assert PORTAL_COOKIE in r.cookies
        async with there.post(login, data={"token": TOKEN}, allow_redirects=False) as r:
            assert r.status == 303, await r.text()


async def test_wrong_sign_ins_alone_lock_out(server: Server) -> None:
    async with _from("127.0.0.3") as here:
        for i in range(20):
            async with here.post(f"{server.base}/login", data={"token": f"no{i}"}) as r:
                assert r.status == 401, i
        async with here.post(f"{server.base}/login", data={"token": "no"}) as r:
            await _locked(r)


async def test_portal_codes_alone_lock_out_and_a_visit_without_a_code_does_not_count(
    server: Server,
) -> None:
    async with _from("127.0.0.4") as here:
        for _ in range(30):
            async with here.get(f"{server.base}/portal/login") as r:
                assert r.status == 401
        for i in range(20):
            async with here.get(f"{server.base}/portal/login?code=x{i}") as r:
                assert r.status == 401, i
        async with here.get(await server.link(), allow_redirects=False) as r:
            await _locked(r)


@pytest.mark.parametrize("kind", ["bearer", "code"])
async def test_guesses_sent_at_once_get_no_more_answers_than_the_limit(
    server: Server, kind: str
) -> None:
    """All pass the first check together while the lookups wait on the
    pool; the check after the lookup keeps all but 20 answers hidden."""

    async def guess(s: aiohttp.ClientSession, i: int) -> int:
        if kind == "bearer":
            headers = {"Authorization": f"Bearer dtk_guess{i}"}
            async with s.get(f"{server.base}/v1/endpoints", headers=headers) as r:
                return r.status
        async with s.get(f"{server.base}/portal/login?code=guess{i}") as r:
            return r.status

    async with _from("127.0.0.5") as s:
        statuses = await asyncio.gather(*(guess(s, i) for i in range(100)))
    assert set(statuses) <= {401, 429}, statuses
    assert statuses.count(401) <= 20, statuses.count(401)


@pytest.mark.parametrize(("limit", "tries", "last"), [(3, 3, 429), (0, 100, 401)])
async def test_the_limit_is_a_setting(db_url: str, limit: int, tries: int, last: int) -> None:
    async with _server(db_url, auth_failures_per_min=limit) as server, _from("127.0.0.1") as s:
        for _ in range(tries):
            async with s.get(f"{server.base}/v1/health", headers=WRONG) as r:
                assert r.status == 401
        async with s.get(f"{server.base}/v1/health", headers=WRONG) as r:
            assert r.status == last


# ---------------------------------------------------------------- HEAD on a portal link


async def test_head_on_a_portal_link_does_not_spend_the_code(server: Server) -> None:
    link = await server.link()
    async with _from("127.0.0.1") as s:
        for _ in range(2):  # a scanner may look twice
            async with s.head(link, allow_redirects=False) as r:
                assert r.status == 200
                assert PORTAL_COOKIE not in r.cookies
                assert "Set-Cookie" not in r.headers
        async with s.get(link, allow_redirects=False) as r:
            assert r.status == 303, await r.text()
            assert r.headers["Location"] == "/portal"
            assert PORTAL_COOKIE in r.cookies
        async with s.get(link, allow_redirects=False) as r:
            assert r.status == 401  # spent by the GET, and only by it


# ---------------------------------------------------------------- limit on lists

ROWS = 1200


async def _many_dead_letters(conn: asyncpg.Connection, server: Server) -> None:
    async with (
        aiohttp.ClientSession(headers=ADMIN) as s,
        s.post(
            f"{server.base}/v1/endpoints",
            json={"app": APP, "url": "http://127.0.0.1:9/hook", "event_types": ["t"]},
        ) as r,
    ):
        assert r.status == 201, await r.text()
        endpoint = (await r.json())["id"]
    await conn.execute(
        "SELECT dispatcher_enqueue_app($1, 't', '{}', 'e' || n, $2) FROM generate_series(1, $3) n",
        APP, endpoint, ROWS,
    )  # fmt: skip
    n = await conn.fetchval(
        "WITH d AS (UPDATE webhook_queue SET status = 'dead_letter', last_error = 'HTTP 500'"
        " RETURNING 1) SELECT count(*) FROM d"
    )
    assert n == ROWS


@pytest.mark.parametrize(
    "path",
    ["/v1/dead-letters", "/v1/deliveries", "/v1/deliveries?status=dead_letter"],
)
@pytest.mark.parametrize("who", [lambda s: TOKEN, lambda s: s.app_token], ids=["admin", "app"])
async def test_a_limit_over_1000_is_clamped(
    db_url: str, conn: asyncpg.Connection, path: str, who: Callable[[Server], str]
) -> None:
    async with _server(db_url, allow_private_targets=True) as server:
        await _many_dead_letters(conn, server)
        sep = "&" if "?" in path else "?"
        headers = {"Authorization": f"Bearer {who(server)}"}
        async with aiohttp.ClientSession(headers=headers) as s:
            for limit, expected in [(5000, 1000), (1000, 1000), (1001, 1000), (7, 7), (None, 100)]:
                query = "" if limit is None else f"{sep}limit={limit}"
                async with s.get(f"{server.base}{path}{query}") as r:
                    assert r.status == 200, (limit, await r.text())
                    doc = await r.json()
                    rows = doc["deliveries"] if isinstance(doc, dict) else doc
                    assert len(rows) == expected, limit
            async with s.get(f"{server.base}{path}{sep}limit=0") as r:
                assert r.status == 400
