"""https targets: DISPATCHER_CA_FILE adds trusted CAs beside the system
store; without it a certificate from an unknown CA is refused (a retryable
attempt, never a delivery), and a CA file that cannot be read stops the
worker with one clear line."""

from __future__ import annotations

import json
import ssl
from collections.abc import AsyncIterator
from pathlib import Path

import asyncpg
import pytest
from aiohttp import web

from benchmarks.tlsca import TlsFiles, make_ca
from dispatcher import enqueue
from dispatcher.core.errors import OperationalError
from dispatcher.settings import Settings
from tests.helpers import add_endpoint, drain


@pytest.fixture
def tls(tmp_path: Path) -> TlsFiles:
    return make_ca(tmp_path / "tls")


@pytest.fixture
async def https_url(tls: TlsFiles) -> AsyncIterator[str]:
    got: list[bytes] = []

    async def hook(request: web.Request) -> web.Response:
        got.append(await request.read())
        return web.Response(status=204)

    app = web.Application()
    app.router.add_post("/hook", hook)
    runner = web.AppRunner(app, handle_signals=False, access_log=None, shutdown_timeout=0.1)
    await runner.setup()
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ctx.load_cert_chain(tls.cert, tls.key)
    site = web.TCPSite(runner, "127.0.0.1", 0, ssl_context=ctx)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    yield f"https://127.0.0.1:{port}/hook"
    await runner.cleanup()


async def test_a_ca_file_makes_its_certificates_trusted(
    conn: asyncpg.Connection, db_url: str, https_url: str, tls: TlsFiles
) -> None:
    await add_endpoint(conn, https_url)
    await enqueue(conn, "t", {"n": 1}, "evt_tls")
    await drain(db_url, ca_file=tls.ca)
    row = await conn.fetchrow("SELECT status, attempt_count, last_status_code FROM webhook_queue")
    assert (row["status"], row["attempt_count"], row["last_status_code"]) == ("delivered", 1, 204)
    # The handshake timed apart from the TCP connect (worker/phases.py),
    # both within the attempt's total; no DNS for an IP literal.
    t = json.loads(await conn.fetchval("SELECT detail FROM endpoint_latency"))["timings_ms"]
    assert t["dns"] is None and t["tls"] is not None and t["connect"] is not None
    assert 0 < t["tls"] and t["connect"] + t["tls"] <= t["total"]


async def test_an_unknown_ca_is_refused_and_retried(
    conn: asyncpg.Connection, db_url: str, https_url: str
) -> None:
    await add_endpoint(conn, https_url, retry_base_ms=60_000)
    await enqueue(conn, "t", {"n": 1}, "evt_untrusted")
    await drain(db_url)
    row = await conn.fetchrow("SELECT status, attempt_count, last_error FROM webhook_queue")
    assert (row["status"], row["attempt_count"]) == ("failed", 1)
    assert "certificate" in row["last_error"].lower()


async def test_an_unreadable_ca_file_stops_the_worker_clearly(db_url: str, tmp_path: Path) -> None:
    missing = tmp_path / "nope.pem"
    with pytest.raises(OperationalError, match="DISPATCHER_CA_FILE"):
        await drain(db_url, ca_file=missing)


def test_the_ca_file_comes_from_the_environment(tmp_path: Path) -> None:
    assert Settings.from_env({}).ca_file is None
    pem = tmp_path / "ca.pem"
    assert Settings.from_env({"DISPATCHER_CA_FILE": str(pem)}).ca_file == pem
