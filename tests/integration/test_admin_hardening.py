"""The admin server under hostile input: every error a JSON 4xx, security
headers on every answer, the dashboard's sign-in, and a fuzz run."""

from __future__ import annotations

import asyncio
import gzip
import io
import json
import logging
import re
from collections.abc import AsyncIterator
from dataclasses import replace

import aiohttp
import asyncpg
import pytest
from aiohttp import web
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dispatcher.web.admin import start_admin
from dispatcher.web.security import PAGE_MAY_SET, SECURITY_HEADERS
from tests.helpers import FAST, add_endpoint, drain

TOKEN = "hardening-token"
AUTH = {"Authorization": f"Bearer {TOKEN}"}


@pytest.fixture
async def base(db_url: str) -> AsyncIterator[str]:
    runner: web.BaseRunner = await start_admin(
        "127.0.0.1:0", replace(FAST, admin_token=TOKEN, allow_private_targets=False), db_url,
        quiet=True,
    )  # fmt: skip
    host, port = runner.addresses[0][:2]
    yield f"http://{host}:{port}"
    await runner.cleanup()


async def _raw(base: str, request: bytes) -> tuple[int, bytes, bytes]:
    """One hand-written HTTP/1.1 request; (status, head, body)."""
    host, port = base.removeprefix("http://").split(":")
    reader, writer = await asyncio.open_connection(host, int(port))
    writer.write(request)
    await writer.drain()
    data = await asyncio.wait_for(reader.read(), 10)
    writer.close()
    head, _, body = data.partition(b"\r\n\r\n")
    return int(head.split()[1]), head, body


def _assert_hardened(r: aiohttp.ClientResponse) -> None:
    for name, value in SECURITY_HEADERS.items():
        if name in PAGE_MAY_SET and r.url.path in ("/", "/login"):
            # The sign-in page lets its form's POST carry our Origin.
            assert r.headers.get(name) in (value, "same-origin"), (r.url, name)
        else:
            assert r.headers.get(name) == value, (r.url, name)
    assert "frame-ancestors 'none'" in r.headers["Content-Security-Policy"]
    assert not re.search(r"[0-9]", r.headers["Server"]), r.headers["Server"]


async def test_every_answer_carries_the_security_headers(base: str) -> None:
    async with aiohttp.ClientSession() as s:
        for method, path, headers in [
            ("GET", "/healthz", {}), ("GET", "/readyz", {}), ("GET", "/metrics", AUTH),
            ("GET", "/v1/endpoints", AUTH), ("GET", "/v1/endpoints", {}), ("GET", "/nope", AUTH),
            ("DELETE", "/v1/health", AUTH), ("GET", "/", AUTH), ("GET", "/login", {}),
            ("GET", "/static/dashboard.js", {}), ("GET", "/v1/openapi.json", AUTH),
        ]:  # fmt: skip
            async with s.request(method, base + path, headers=headers,
                                 allow_redirects=False) as r:  # fmt: skip
                _assert_hardened(r)
                if r.status >= 400:
                    assert r.content_type == "application/json", (path, r.status)
                    assert "error" in await r.json()


async def test_malformed_requests_answer_json_4xx(base: str, conn: asyncpg.Connection) -> None:
    eid, _ = await add_endpoint(conn, "https://example.com/a")
    async with aiohttp.ClientSession(headers=AUTH) as s:
        cases = [
            ("GET", "/v1/endpoints/%D9%A3", None, 404),  # an Arabic-Indic 3 is not an id
            ("GET", "/v1/endpoints/9223372036854775808", None, 400),
            ("GET", "/v1/dead-letters?limit=%D9%A3", None, 400),
            ("GET", "/v1/deliveries?event_id=%00", None, 400),
            ("GET", "/v1/dead-letters?endpoint_id=99999999999999999999", None, 400),
            (
                "POST",
                "/v1/dead-letters/replay",
                {"endpoint_id": eid, "since": "9999-12-31T23:59:59-23:59"},
                400,
            ),
            ("POST", "/v1/dead-letters/replay", {"endpoint": None, "endpoint_id": eid}, 400),
            ("PUT", "/v1/health", None, 405),
            ("GET", "/v1/nothing-here", None, 404),
            ("POST", "/v1/endpoints", {"url": "http://xn--zz.example/hook"}, 400),
            ("POST", "/v1/endpoints", {"url": "http://2130706433:9/"}, 400),
            ("POST", "/v1/endpoints", {"url": "http://127.1/"}, 400),
            ("PATCH", f"/v1/endpoints/{eid}", {"url": "http://0x7f000001/"}, 400),
            ("PATCH", f"/v1/endpoints/{eid}", {"url": "http://xn--zz.example/"}, 400),
            (
                "POST",
                "/v1/events",
                {"event_type": "t", "payload": {}, "endpoint": None, "endpoint_id": eid},
                400,
            ),
            ("POST", "/v1/events", {"event_type": "t", "payload": {}, "endpoint_ID": eid}, 400),
            ("POST", "/v1/events", {"event_type": "t", "payload": {}, "colour": 1}, 400),
            ("POST", f"/v1/endpoints/{eid}/rotate-secret", {"grace": 1}, 400),
        ]
        for method, path, body, want in cases:
            async with s.request(method, base + path, json=body) as r:
                assert r.status == want, (method, path, body, r.status, await r.text())
                assert r.content_type == "application/json"
                assert "error" in await r.json()
        async with s.post(base + "/v1/events", data=b"{not gzip", headers={
            "Content-Encoding": "gzip", "Content-Type": "application/json"}) as r:  # fmt: skip
            assert r.status == 400 and "error" in await r.json()
        packed = gzip.compress(b'{"event_type": "t", "payload": {}}')
        async with s.post(base + "/v1/events", data=packed,
                          headers={"Content-Encoding": "gzip"}) as r:  # fmt: skip
            assert r.status == 202
        async with s.post(base + "/v1/events", data=io.BytesIO(b"x" * (3 * 1024 * 1024))) as r:
            assert r.status == 413 and "error" in await r.json()
    assert await conn.fetchval("SELECT url FROM endpoints WHERE id = $1", eid) == (
        "https://example.com/a"
    )
    assert await conn.fetchval("SELECT count(*) FROM endpoints") == 1


async def test_a_request_aiohttp_cannot_parse_answers_like_every_other_error(
    base: str, caplog: pytest.LogCaptureFixture
) -> None:
    """No middleware sees these: the connection handler answers them (JSON,
    the security headers, closed) and logs one line, no traceback, and
    nothing of the bytes it could not parse."""
    caplog.set_level(logging.DEBUG)
    for request in (
        b"GET /v1/health HTTP/1.1\r\nHost: x\r\nBad\x01: secret-1\r\n\r\n",
        b"GET /v1/health?secret-2 HTTP/9.9\r\n\r\n",
        b"POST /v1/events HTTP/1.1\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\nab",
    ):
        # _raw reads until the server closes the connection (an HTTP/1.0 answer).
        status, head, body = await _raw(base, request)
        assert status == 400, head
        assert json.loads(body) == {"error": "malformed request"}
        lines = head.decode("latin-1").lower().split("\r\n")
        assert "content-type: application/json" in lines
        for name, value in SECURITY_HEADERS.items():
            assert f"{name}: {value}".lower() in lines, name
    logged = [r for r in caplog.records if r.name.startswith(("aiohttp", "dispatcher"))]
    assert not [r for r in logged if r.exc_info], "a traceback was logged"
    assert [r.getMessage() for r in logged if r.name.startswith("aiohttp")] == []
    assert "secret-" not in "\n".join(r.getMessage() for r in logged)


async def test_a_body_left_unread_closes_the_connection_without_a_traceback(
    base: str, caplog: pytest.LogCaptureFixture
) -> None:
    """Refused before its body is read (401), a body that does not decode is
    not drained: the answer says the connection closes, and it does."""
    caplog.set_level(logging.DEBUG)
    garbage = b"{not gzip" * 1000
    lines = ["POST /v1/events HTTP/1.1", "Host: x", "Content-Encoding: gzip",
             f"Content-Length: {len(garbage)}"]  # fmt: skip
    status, head, body = await _raw(base, "\r\n".join(lines).encode() + b"\r\n\r\n" + garbage)
    assert status == 401 and b'"error"' in body
    assert "connection: close" in head.decode().lower().split("\r\n")
    assert not [r for r in caplog.records if r.exc_info], "a traceback was logged"


async def test_non_ascii_bearer_token_is_a_401(base: str) -> None:
    port = base.rsplit(":", 1)[1]
    for value in (b"Bearer \xff", b"Bearer \xc3\x28", b"\xff\xfe", b"Bearer " + TOKEN.encode()
                  + b"\xff"):  # fmt: skip
        status, head, body = await _raw(base, b"GET /v1/health HTTP/1.1\r\nHost: 127.0.0.1:"
                                        + port.encode() + b"\r\nAuthorization: " + value
                                        + b"\r\nConnection: close\r\n\r\n")  # fmt: skip
        assert status == 401, (value, head)
        assert b"application/json" in head and b'"error"' in body


async def test_header_values_never_come_back(base: str, db_url: str) -> None:
    async with aiohttp.ClientSession(headers=AUTH) as s:
        async with s.post(
            base + "/v1/endpoints",
            json={"url": "https://example.com/h", "headers": {"X-Api-Key": "top-s3cret"}},
        ) as r:
            assert r.status == 201
            created = await r.json()
        for path in ("/v1/endpoints", f"/v1/endpoints/{created['id']}"):
            async with s.get(base + path) as r:
                text = await r.text()
                assert "top-s3cret" not in text and "X-Api-Key" in text
        async with s.post(base + f"/v1/endpoints/{created['id']}/disable") as r:
            assert "top-s3cret" not in await r.text()
    assert created["headers"] == {"X-Api-Key": "••••"}


async def test_dashboard_signs_in_once_with_a_cookie(base: str) -> None:
    jar = aiohttp.CookieJar(unsafe=True)
    async with aiohttp.ClientSession(cookie_jar=jar) as s:
        # The dashboard's address takes the token once (SPEC): a wrong one
        # signs nobody in; the right one is exchanged for the cookie and a
        # 303 to the page itself, so the token leaves the address bar.
        async with s.get(base + "/?token=wrong", allow_redirects=False) as r:
            assert r.status == 401 and "Set-Cookie" not in r.headers
            assert "not the admin token" in await r.text()
        async with s.get(base + "/v1/health?token=" + TOKEN) as r:
            assert r.status == 401  # nowhere else
        async with s.get(base + "/v1/health") as r:
            assert r.status == 401
        async with s.get(base + "/?token=" + TOKEN, allow_redirects=False) as r:
            assert r.status == 303 and r.headers["Location"] == "/"
            cookie = r.headers["Set-Cookie"]
            assert "HttpOnly" in cookie and "SameSite=Strict" in cookie and TOKEN not in cookie
        async with s.get(base + "/v1/health") as r:
            assert r.status == 200
        jar.clear()
        async with s.post(base + "/login", data={"token": TOKEN}, allow_redirects=False) as r:
            assert r.status == 303 and r.headers["Location"] == "/"
            cookie = r.headers["Set-Cookie"]
            assert "HttpOnly" in cookie and "SameSite=Strict" in cookie and TOKEN not in cookie
        async with s.get(base + "/") as r:
            page = await r.text()
            assert r.status == 200 and TOKEN not in page and "localStorage" not in page
            csrf = re.search(r'name="csrf-token" content="([^"]+)"', page)
            assert csrf is not None
        async with s.get(base + "/static/dashboard.js") as r:
            assert "localStorage" not in await r.text()
        async with s.get(base + "/v1/health") as r:
            assert r.status == 200
        new = {"url": "https://example.com/d"}
        async with s.post(base + "/v1/endpoints", json=new) as r:
            assert r.status == 403  # a cookie alone cannot change anything
        async with s.post(base + "/v1/endpoints", json=new,
                          headers={"X-CSRF-Token": "forged"}) as r:  # fmt: skip
            assert r.status == 403
        async with s.post(base + "/v1/endpoints", json=new, headers={
                "X-CSRF-Token": csrf[1], "Origin": "https://evil.example"}) as r:  # fmt: skip
            assert r.status == 403
        async with s.post(base + "/v1/endpoints", json=new,
                          headers={"X-CSRF-Token": csrf[1]}) as r:  # fmt: skip
            assert r.status == 201, await r.text()
        async with s.post(base + "/logout", headers={"X-CSRF-Token": csrf[1]},
                          allow_redirects=False) as r:  # fmt: skip
            assert r.status == 303
        async with s.get(base + "/v1/health") as r:
            assert r.status == 401
    async with aiohttp.ClientSession(cookie_jar=aiohttp.CookieJar(unsafe=True)) as s:
        async with s.post(base + "/login", data={"token": "nope"}) as r:
            assert r.status == 401 and "text/html" in r.content_type
        async with s.post(base + "/login", data={"token": TOKEN}) as r:
            assert r.status == 200 and str(r.url).endswith("/") and "csrf-token" in await r.text()


async def test_non_canonical_loopback_is_a_refused_target_at_send_time(
    conn: asyncpg.Connection, db_url: str
) -> None:
    """Written around `endpoint add` (the Python API): the wire refuses it,
    permanently, as the loopback address it is."""
    for n, host in enumerate(["2130706433", "0177.0.0.1", "127.1", "0x7f000001"]):
        await add_endpoint(conn, f"http://{host}:9/hook", event_types=(f"t{n}",))
        await conn.execute("SELECT dispatcher_enqueue($1, '{}', $2)", f"t{n}", f"e{n}")
    await drain(db_url, allow_private_targets=False)
    rows = await conn.fetch("SELECT status, attempt_count, last_error FROM webhook_queue")
    assert len(rows) == 4
    for row in rows:
        assert row["status"] == "dead_letter" and row["attempt_count"] == 1, dict(row)
        assert row["last_error"].startswith("refused target: non-public address")


# ---------------------------------------------------------------- fuzz

_texts = st.text(st.characters(codec="utf-8"), max_size=30)
_ids = st.one_of(
    st.integers(-(2**70), 2**70).map(str), _texts,
    st.sampled_from(["%D9%A3", "%00", "%ff", "1e3", "0x10", "+1", " 1", "\u0661", "\uff19"]),
)  # fmt: skip
_header_bytes = st.binary(max_size=40).filter(lambda b: b"\r" not in b and b"\n" not in b)
_bodies = st.one_of(
    st.binary(max_size=200),
    st.dictionaries(_texts, st.one_of(st.none(), st.integers(-(2**70), 2**70), _texts,
                                      st.floats(), st.booleans()), max_size=5)
    .map(lambda d: json.dumps(d).encode()),
)  # fmt: skip
_paths = st.sampled_from([
    "/v1/endpoints/{id}", "/v1/endpoints/{id}/disable", "/v1/endpoints/{id}/rotate-secret",
    "/v1/endpoints/{id}/activity?minutes={id}",
    "/v1/deliveries?event_id={id}", "/v1/dead-letters?limit={id}&endpoint_id={id}",
    "/v1/dead-letters/analyze?hours={id}", "/v1/timeline?minutes={id}", "/v1/endpoints",
    "/v1/events", "/v1/dead-letters/replay", "/{id}", "/?token={id}", "/login", "/logout",
])  # fmt: skip


@settings(max_examples=150, deadline=None, database=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])  # fmt: skip
@given(
    method=st.sampled_from(["GET", "POST", "PATCH", "PUT", "DELETE"]),
    path=_paths, ident=_ids, body=_bodies,
    encoding=st.sampled_from([None, b"gzip", b"deflate", b"br", b"zstd", b"x-nope", b"gzip, br"]),
    auth=st.one_of(st.just(b"Bearer " + TOKEN.encode()), _header_bytes),
    extra=st.lists(st.tuples(st.sampled_from([b"Content-Type", b"Cookie", b"Origin",
                   b"X-CSRF-Token", b"Accept", b"Content-Length"]), _header_bytes), max_size=3),
)  # fmt: skip
async def test_fuzz_never_a_5xx_and_always_json_on_4xx(
    base: str, method: str, path: str, ident: str, body: bytes, encoding: bytes | None,
    auth: bytes, extra: list[tuple[bytes, bytes]],
) -> None:  # fmt: skip
    from urllib.parse import quote

    target = path.replace("{id}", quote(ident, safe="%"))
    host = base.removeprefix("http://").encode()
    lines = [f"{method} {target} HTTP/1.1".encode(), b"Host: " + host, b"Authorization: " + auth,
             b"Connection: close"]  # fmt: skip
    if encoding is not None:
        lines.append(b"Content-Encoding: " + encoding)
    lines += [name + b": " + value for name, value in extra if name != b"Content-Length"]
    lines.append(b"Content-Length: " + str(len(body)).encode())
    request = b"\r\n".join(lines) + b"\r\n\r\n" + body
    status, head, payload = await _raw(base, request)
    assert status < 500, (request, head, payload)
    if status >= 400:
        assert b"application/json" in head or b"text/html" in head, (request, head)
        if b"application/json" in head:
            assert b'"error"' in payload
