"""Egress through real parts: a forward proxy on 127.0.0.1 (CONNECT for
https), and a receiver that demands a client certificate (mTLS)."""

from __future__ import annotations

import json
import ssl
from collections.abc import AsyncIterator
from dataclasses import replace
from pathlib import Path

import asyncpg
import pytest
from aiohttp import web

from benchmarks.tlsca import TlsFiles, make_ca
from dispatcher import enqueue
from tests.client_certs import ClientFiles, make_client
from tests.helpers import FAST, add_endpoint, cli, cli_env, drain
from tests.proxy import Proxy
from tests.receivers import Receiver


@pytest.fixture
async def proxy() -> AsyncIterator[Proxy]:
    p = await Proxy().start()
    yield p
    await p.stop()


@pytest.fixture
def tls(tmp_path: Path) -> TlsFiles:
    return make_ca(tmp_path / "tls")


@pytest.fixture
def client(tmp_path: Path) -> ClientFiles:
    return make_client(tmp_path / "client")


async def _https(
    tls: TlsFiles, client_ca: Path | None = None
) -> tuple[web.AppRunner, int, list[str]]:
    """An https receiver; with `client_ca`, it demands a client certificate
    signed by it. Records each request's client certificate subject ('-' if none)."""
    seen: list[str] = []

    async def hook(request: web.Request) -> web.Response:
        await request.read()
        peer = request.transport.get_extra_info("peercert") if request.transport else None
        subject = dict(x[0] for x in peer["subject"])["commonName"] if peer else "-"
        seen.append(subject)
        return web.Response(status=200)

    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", hook)
    runner = web.AppRunner(app, handle_signals=False, access_log=None, shutdown_timeout=0.1)
    await runner.setup()
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ctx.load_cert_chain(tls.cert, tls.key)
    if client_ca is not None:
        ctx.verify_mode = ssl.CERT_REQUIRED
        ctx.load_verify_locations(cafile=client_ca)
    site = web.TCPSite(runner, "127.0.0.1", 0, ssl_context=ctx)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    return runner, port, seen


async def test_a_receiver_that_demands_a_client_certificate_gets_it(
    conn: asyncpg.Connection, db_url: str, tls: TlsFiles, client: ClientFiles
) -> None:
    runner, port, seen = await _https(tls, client_ca=client.ca)
    env = cli_env(db_url, DISPATCHER_SECRET_KEY="k3y")
    try:
        code, out, err = await cli(
            db_url, "endpoint", "add", "--url", f"https://127.0.0.1:{port}/mtls",
            "--client-cert", str(client.cert), "--client-key", str(client.key), "--json", env=env,
        )  # fmt: skip
        assert code == 0, err
        assert json.loads(out)["client_key"] == "••••"  # never shown back
        code, _, err = await cli(db_url, "endpoint", "add", "--url",
                                 f"https://127.0.0.1:{port}/plain", env=env)  # fmt: skip
        assert code == 0, err
        # Both credentials sealed at rest, like secrets.
        stored = await conn.fetchrow("SELECT client_cert, client_key FROM endpoints WHERE id = 1")
        assert stored["client_cert"].startswith("enc:v1:")
        assert stored["client_key"].startswith("enc:v1:")
        await conn.execute("UPDATE endpoints SET max_attempts = 1")
        await enqueue(conn, "t", "{}", "evt_mtls")
        await drain(db_url, secret_key="k3y", ca_file=tls.ca)
    finally:
        await runner.cleanup()
    assert seen == ["dispatcher client"]  # only the endpoint with the certificate got in
    rows = {r["endpoint_id"]: r for r in await conn.fetch("SELECT * FROM webhook_queue")}
    assert rows[1]["status"] == "delivered"
    assert rows[2]["status"] == "dead_letter" and rows[2]["last_status_code"] is None


async def test_through_a_proxy_names_are_the_proxys_and_literals_are_still_refused(
    conn: asyncpg.Connection, db_url: str, receiver: Receiver, proxy: Proxy, tls: TlsFiles
) -> None:
    runner, port, seen = await _https(tls)
    try:
        # `localhost` is resolved by the proxy, not here: the SSRF guard judges
        # literal addresses only, and the proxy (a private address) is allowed.
        await add_endpoint(conn, f"http://localhost:{receiver.port}/via-proxy")
        await add_endpoint(conn, f"https://localhost:{port}/tls-via-proxy")
        await add_endpoint(conn, f"http://127.0.0.1:{receiver.port}/literal", max_attempts=1)
        await enqueue(conn, "t", '{"n": 1}', "evt_proxy")
        await drain(db_url, allow_private_targets=False, http_proxy=proxy.url, ca_file=tls.ca)
    finally:
        await runner.cleanup()
    assert [r.path for r in receiver.received] == ["/via-proxy"]
    assert seen == ["-"]
    assert any(line.startswith(f"CONNECT localhost:{port} ") for line in proxy.seen)
    assert any(line.startswith(f"POST http://localhost:{receiver.port}/via-proxy ")
               for line in proxy.seen)  # fmt: skip
    literal = await conn.fetchrow("SELECT status, last_error FROM webhook_queue WHERE"
                                  " endpoint_id = 3")  # fmt: skip
    assert literal["status"] == "dead_letter"
    assert literal["last_error"].startswith("refused target")


async def test_endpoint_add_behind_a_proxy_leaves_names_to_it(db_url: str) -> None:
    base = {**cli_env(db_url), "DISPATCHER_ALLOW_PRIVATE_TARGETS": "0"}
    code, _, err = await cli(db_url, "endpoint", "add", "--url", "http://localhost:9/x", env=base)
    assert code == 2 and "DISPATCHER_ALLOW_PRIVATE_TARGETS" in err
    proxied = {**base, "DISPATCHER_HTTP_PROXY": "http://127.0.0.1:3128"}
    code, _, err = await cli(db_url, "endpoint", "add", "--url", "http://localhost:9/x",
                             env=proxied)  # fmt: skip
    assert code == 0, err
    code, _, err = await cli(db_url, "endpoint", "add", "--url", "http://127.0.0.1:9/x",
                             env=proxied)  # fmt: skip
    assert code == 2 and "DISPATCHER_ALLOW_PRIVATE_TARGETS" in err


async def test_a_bad_proxy_setting_is_one_line(db_url: str) -> None:
    env = {**cli_env(db_url), "DISPATCHER_HTTP_PROXY": "socks5://127.0.0.1:1080"}
    code, _, err = await cli(db_url, "run", "--drain", env=env)
    assert code == 2 and "DISPATCHER_HTTP_PROXY" in err and "Traceback" not in err


def test_settings_read_the_proxy() -> None:
    from dispatcher.settings import Settings

    s = Settings.from_env({"DISPATCHER_HTTP_PROXY": "http://10.0.0.5:3128"})
    assert s.http_proxy == "http://10.0.0.5:3128" and s.target_policy().names_via_proxy
    assert replace(FAST).http_proxy is None
