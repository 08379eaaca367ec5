"""The dashboard in a real headless browser (Debian's chromium), clicked
through like an operator would, on a live `dispatcher run --http` worker
delivering to a real receiver on 127.0.0.1."""

from __future__ import annotations

import asyncio
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import asyncpg
import pytest

from dispatcher import enqueue
from tests.browser import CHROMIUM, Page, browser
from tests.helpers import WORKER_ENV, add_endpoint, cli_env, free_port
from tests.receivers import Receiver, sequence

TOKEN = "dash-admin-token-0123456789"

pytestmark = pytest.mark.skipif(
    CHROMIUM is None, reason="chromium is not installed (.ci/run installs it)"
)


@pytest.fixture
async def console(db_url: str) -> AsyncIterator[str]:
    """`dispatcher run --http`: the worker and its admin server, one process."""
    port = free_port()
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "dispatcher", "run", "--http", f"127.0.0.1:{port}",
        env=cli_env(db_url, **WORKER_ENV, DISPATCHER_ADMIN_TOKEN=TOKEN),
        stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.DEVNULL,
    )  # fmt: skip
    base = f"http://127.0.0.1:{port}"
    try:
        async with aiohttp.ClientSession() as s:
            for _ in range(200):
                try:
                    async with s.get(base + "/readyz") as r:
                        if r.status == 200:
                            break
                except aiohttp.ClientError:
                    pass
                await asyncio.sleep(0.05)
        yield base
    finally:
        proc.terminate()
        assert await asyncio.wait_for(proc.wait(), 20) == 0


async def _until(conn: asyncpg.Connection, sql: str, *args: object, timeout: float = 20) -> None:
    async def poll() -> None:
        while not await conn.fetchval(sql, *args):
            await asyncio.sleep(0.05)

    await asyncio.wait_for(poll(), timeout)


async def _sign_in(page: Page, base: str) -> None:
    await page.goto(base + "/")
    await page.wait("document.querySelector('form#login') !== null")
    await page.type("#token", TOKEN)
    await page.click("form#login button[type=submit]")
    await page.wait("document.querySelector('#endpoints [data-endpoint]') !== null")


async def test_operator_finds_an_event_replays_its_dead_letter_and_watches_it_delivered(
    db_url: str, conn: asyncpg.Connection, receiver: Receiver, console: str, tmp_path: Path
) -> None:
    receiver.routes["/partner"] = sequence(500)  # down once, then fine
    billing, _ = await add_endpoint(conn, receiver.url("/billing"), name="Billing (prod)")
    partner, _ = await add_endpoint(conn, receiver.url("/partner"), name="Partner postbacks",
                                    description="conversions for the partner network",
                                    max_attempts=1)  # fmt: skip
    for i in range(5):
        await enqueue(conn, "order.paid", {"i": i}, f"warm-{i}", endpoint_id=billing)
    await enqueue(conn, "order.paid", {"order": 1}, "order-1")
    await _until(conn, "SELECT count(*) = 1 FROM webhook_queue WHERE status = 'dead_letter'")
    dead_id = await conn.fetchval(
        "SELECT id FROM webhook_queue WHERE event_id = 'order-1' AND endpoint_id = $1", partner
    )

    async with browser(tmp_path / "profile") as page:
        await _sign_in(page, console)
        assert TOKEN not in await page.eval("location.href + document.documentElement.outerHTML")
        endpoints = await page.text("#endpoints")
        assert "Billing (prod)" in endpoints and "Partner postbacks" in endpoints
        await page.wait("document.querySelector('#alerts').innerText.includes("
                        "'Dead letters rising: 1 in the last hour')")  # fmt: skip
        assert "{" not in await page.text("#alerts")  # sentences, not JSON

        # Find the event by its id, open the dead delivery's attempts.
        await page.click('header nav a[href="#/events"]')
        await page.type("#event-id", "order-1")
        await page.click("#event-search button[type=submit]")
        await page.wait("document.querySelectorAll('article.delivery').length === 2")
        dead = f'article[data-delivery="{dead_id}"]'
        assert await page.eval(f"document.querySelector('{dead}').dataset.status") == "dead_letter"
        await page.click(f'button[data-attempts="{dead_id}"]')
        await page.wait(f"document.querySelector('{dead} table') !== null")
        attempts = await page.text(f"{dead} table")
        assert "HTTP 500" in attempts and "Partner postbacks" in await page.text(dead)

        # Replay it from the dead-letter list, follow it until delivered.
        await page.click('header nav a[href="#/dead-letters"]')
        await page.click(f'tr[data-dead-letter="{dead_id}"] button[data-replay]')
        await page.wait("document.querySelector('#dl-message').innerText.includes('Requeued 1')")
        await page.click("#dl-message a")
        await page.wait(f"document.querySelector('{dead}')?.dataset.status === 'delivered'", 30)
        assert len(receiver.requests_to("/partner")) == 2
        assert receiver.requests_to("/partner")[1].headers["webhook-id"] == "order-1"

        # The endpoint's own page: its failure, its chart, and the switch.
        await page.click(f'{dead} a[href="#/endpoints/{partner}"]')
        await page.wait("document.querySelector('#ep-name').innerText === 'Partner postbacks'")
        await page.wait("document.querySelector('#failures').innerText.includes('order-1')")
        assert "HTTP 500" in await page.text("#failures")
        assert "partner network" in await page.text("#ep-description")
        assert await page.eval("document.querySelectorAll('#latency polyline, #latency circle')"
                               ".length > 0")  # fmt: skip
        await page.click("#ep-disable")
        await page.wait("!document.querySelector('#ep-enable').hidden")
        assert await conn.fetchval("SELECT enabled FROM endpoints WHERE id = $1", partner) is False
        await page.click("#ep-enable")
        await page.wait("!document.querySelector('#ep-disable').hidden")
        assert await conn.fetchval("SELECT enabled FROM endpoints WHERE id = $1", partner) is True
        await page.screenshot(tmp_path / "endpoint.png")
        assert page.errors == []


async def test_replay_of_an_endpoints_dead_letters_since_a_time(
    db_url: str, conn: asyncpg.Connection, receiver: Receiver, console: str, tmp_path: Path
) -> None:
    receiver.routes["/partner"] = sequence(500, 500)
    partner, _ = await add_endpoint(conn, receiver.url("/partner"), name="Partner postbacks",
                                    max_attempts=1)  # fmt: skip
    for i in range(2):
        await enqueue(conn, "t", {"i": i}, f"lost-{i}")
    await _until(conn, "SELECT count(*) = 2 FROM webhook_queue WHERE status = 'dead_letter'")
    async with browser(tmp_path / "profile") as page:
        await _sign_in(page, console)
        await page.goto(f"{console}/#/dead-letters?endpoint={partner}")
        await page.wait("document.querySelectorAll('tr[data-dead-letter]').length === 2")
        # An hour back, in the browser's own local time (what the field shows).
        await page.eval(
            "(() => { const off = new Date().getTimezoneOffset() * 60e3;"
            " const t = new Date(Date.now() - 3600e3 - off);"
            " document.querySelector('#bulk-since').value = t.toISOString().slice(0, 19); })()"
        )
        await page.click("#dl-bulk button[type=submit]")
        await page.wait("document.querySelector('#dl-message').innerText.includes('Requeued 2')")
        await _until(conn, "SELECT count(*) = 2 FROM webhook_queue WHERE status = 'delivered'")
        assert page.errors == []


async def test_sign_in_from_the_address_leaves_no_token_in_it(console: str, tmp_path: Path) -> None:
    async with browser(tmp_path / "profile") as page:
        await page.goto(f"{console}/?token=nope")
        await page.wait("document.querySelector('form#login') !== null")
        assert "not the admin token" in await page.text("body")
        status = await page.eval("fetch('/v1/health').then(r => r.status)")
        assert status == 401  # no session came of it
        await page.goto(f"{console}/?token={TOKEN}")
        await page.wait("location.pathname === '/' && location.search === ''")
        status = await page.eval("fetch('/v1/health').then(r => r.status)")
        assert status == 200  # the cookie, not the address, signs the calls in
        assert TOKEN not in await page.eval("location.href")


async def test_narrow_screen_keeps_the_console_usable(
    conn: asyncpg.Connection, receiver: Receiver, console: str, tmp_path: Path
) -> None:
    # A name is text wherever it shows, never markup.
    name = '<b id="pwned">Shop</b>'
    await add_endpoint(conn, receiver.url("/a-rather-long-path/for/a/narrow/screen"), name=name)
    async with browser(tmp_path / "profile") as page:
        await page.resize(390, 844)
        await _sign_in(page, console)
        assert name in await page.text("#endpoints")
        assert await page.eval("document.querySelector('#pwned') === null")
        # Nothing wider than the screen but the tables, which scroll in place.
        assert await page.eval("document.documentElement.scrollWidth <= window.innerWidth")
        await page.click('header nav a[href="#/events"]')
        await page.wait("document.querySelector('#event-id') !== null")
        assert await page.eval("document.documentElement.scrollWidth <= window.innerWidth")
        assert page.errors == []
