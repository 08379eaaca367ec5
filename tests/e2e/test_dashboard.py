"""The dashboard in a real headless browser (Debian's chromium), on a live run."""

from __future__ import annotations

import asyncio
import shutil
from dataclasses import replace
from pathlib import Path

import asyncpg
import pytest

from dispatcher import enqueue
from dispatcher.admin import start_admin
from tests.helpers import FAST, add_endpoint, drain
from tests.receivers import Receiver, status

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
FLAGS = [
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
    "--virtual-time-budget=8000",
]  # fmt: skip

pytestmark = pytest.mark.skipif(
    CHROMIUM is None, reason="chromium is not installed (.ci/run installs it)"
)


async def _chromium(*args: str, profile: Path) -> str:
    assert CHROMIUM is not None
    proc = await asyncio.create_subprocess_exec(
        CHROMIUM, *FLAGS, f"--user-data-dir={profile}", *args,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.DEVNULL,
    )  # fmt: skip
    out, _ = await asyncio.wait_for(proc.communicate(), 90)
    return out.decode()


async def test_dashboard_shows_endpoints_percentiles_and_breakers(
    db_url: str, conn: asyncpg.Connection, receiver: Receiver, tmp_path: Path
) -> None:
    receiver.routes["/down"] = status(500)
    ok, _ = await add_endpoint(conn, receiver.url("/ok"))
    down, _ = await add_endpoint(conn, receiver.url("/down"), failure_threshold=3, max_in_flight=1,
                                 retry_base_ms=0, retry_cap_ms=0, max_attempts=20)  # fmt: skip
    for i in range(30):
        await enqueue(conn, "t", {"i": i}, f"dash{i}")
    await drain(db_url)
    runner = await start_admin("127.0.0.1:0", replace(FAST, admin_token="tok"), db_url, quiet=True)
    host, port = runner.addresses[0][:2]
    try:
        url = f"http://{host}:{port}/?token=tok"
        dom = await _chromium("--dump-dom", url, profile=tmp_path / "p1")
        shot = tmp_path / "dashboard.png"
        await _chromium("--window-size=1400,1000", f"--screenshot={shot}", url,
                        profile=tmp_path / "p2")  # fmt: skip
    finally:
        await runner.cleanup()
    h = await conn.fetchrow("SELECT p50_ms FROM endpoint_health WHERE endpoint_id=$1", ok)
    assert f'data-endpoint="{ok}"' in dom and f'data-endpoint="{down}"' in dom
    assert receiver.url("/down") in dom
    assert 'class="pill open"' in dom and 'class="pill closed"' in dom
    assert f"<td>{h['p50_ms']:.1f}</td>" in dom or f"<td>{int(h['p50_ms'])}</td>" in dom
    assert "dead_letters_rising" in dom
    assert shot.exists() and shot.stat().st_size > 10_000


async def test_dashboard_sign_in_keeps_no_token_in_the_page(db_url: str, tmp_path: Path) -> None:
    token = "dash-admin-token-0123456789"
    runner = await start_admin("127.0.0.1:0", replace(FAST, admin_token=token), db_url, quiet=True)
    host, port = runner.addresses[0][:2]
    base = f"http://{host}:{port}"
    try:
        wrong = await _chromium("--dump-dom", f"{base}/?token=nope", profile=tmp_path / "w")
        plain = await _chromium("--dump-dom", f"{base}/", profile=tmp_path / "p")
        signed = await _chromium("--dump-dom", f"{base}/?token={token}", profile=tmp_path / "s")
    finally:
        await runner.cleanup()
    # A wrong token and no session both show the sign-in form, not the data.
    for dom in (wrong, plain):
        assert 'action="/login"' in dom and 'name="token"' in dom and "data-endpoint" not in dom
    assert "not the admin token" in wrong
    # Signed in: the dashboard ran (its script loaded under the CSP and its
    # calls went out with the cookie), and the token is nowhere in the page.
    assert 'id="signout"' in signed and "updated " in signed and token not in signed
