"""The operator's console for the day's work (issue 25), clicked through in
a real headless browser at 1280 and 375 px wide, on a live `dispatcher run
--http` worker delivering to a real receiver on 127.0.0.1: find a failed
delivery by type and time and read its payload, edit the endpoint from a
suggested action, replay a page of dead letters, create an application and
open its portal link.

With SCREENSHOTS_DIR=DIR the 1280 px run also saves the pictures the
guide shows (docs/guide/console-*.png)."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import asyncpg
import pytest

from dispatcher import enqueue
from tests.browser import CHROMIUM, Page, browser
from tests.e2e import test_dashboard as dashboard
from tests.e2e.test_portal import _admin
from tests.helpers import add_endpoint
from tests.receivers import Receiver, status

pytestmark = pytest.mark.skipif(
    CHROMIUM is None, reason="chromium is not installed (.ci/run installs it)"
)

console = dashboard.console
_until = dashboard._until


async def _fits(page: Page) -> None:
    """Nothing wider than the window but the tables, which scroll in place."""
    assert await page.eval("document.documentElement.scrollWidth <= window.innerWidth")


def _keep(shot: Path, name: str) -> None:
    target = os.environ.get("SCREENSHOTS_DIR")
    if target:
        shutil.copyfile(shot, Path(target) / name)


@pytest.mark.parametrize("width", [1280, 375])
async def test_an_operators_day_in_the_console(
    conn: asyncpg.Connection, receiver: Receiver, console: str, tmp_path: Path, width: int
) -> None:
    receiver.routes["/partner"] = status(500)
    await _admin(console, "POST", "/v1/event-types",
                 {"name": "refund.issued", "description": "A refund went out",
                  "schema": {"type": "object", "examples": [{"refund": 7}]}})  # fmt: skip
    await add_endpoint(conn, receiver.url("/orders"), name="Orders")
    partner, secret = await add_endpoint(
        conn, receiver.url("/partner"), name="Partner", max_attempts=1,
        event_types=("refund.issued",),
    )  # fmt: skip
    for i in range(3):
        await enqueue(conn, "order.paid", {"order": i}, f"paid-{i}")
    for i in range(3):
        await enqueue(conn, "refund.issued", {"refund": i, "reason": "late"}, f"refund-{i}")
    await _until(conn, "SELECT count(*) = 3 FROM webhook_queue WHERE status = 'dead_letter'")
    await _until(conn, "SELECT count(*) = 6 FROM webhook_queue WHERE status = 'delivered'")
    dead = await conn.fetchval(
        "SELECT id FROM webhook_queue WHERE event_id = 'refund-1' AND endpoint_id = $1", partner
    )

    async with browser(tmp_path / "profile") as page:
        await page.resize(width, 900)
        await dashboard._sign_in(page, console)
        await _fits(page)
        # The success rate per endpoint, beside the breaker; dates in full.
        await page.wait("document.querySelector('#endpoints').innerText.includes('0% of 3')")
        assert "100% of 6" in await page.text("#endpoints")
        shot = tmp_path / "console.png"
        await page.screenshot(shot)

        # Find the failed refund by its type and a time range, open its payload.
        await page.click('header nav a[href="#/deliveries"]')
        await page.choose("#dv-status", "dead_letter")
        await page.type("#dv-type", "refund.issued")
        await page.eval(  # an hour back, in the browser's local time (what the field shows)
            "(() => { const off = new Date().getTimezoneOffset() * 60e3;"
            " const t = new Date(Date.now() - 3600e3 - off);"
            " document.querySelector('#dv-since').value = t.toISOString().slice(0, 19); })()"
        )
        await page.click("#dv-search button[type=submit]")
        rows = "[...document.querySelectorAll('#dv-list tr[data-delivery]')]"
        await page.wait(
            f"{rows}.length === 3 && {rows}.every(r => r.dataset.status === 'dead_letter')"
        )
        assert "refund.issued" in await page.eval("location.hash")
        assert await page.eval(r"/\d{4}-\d\d-\d\d \d\d:\d\d/.test("
                               "document.querySelector('#dv-list tbody').innerText)")  # fmt: skip
        await _fits(page)
        if width == 1280:
            await page.screenshot(tmp_path / "console-deliveries.png")
        await page.click(f'a[data-open="{dead}"]')
        await page.wait("document.querySelector('#dl-payload').innerText.includes('reason')")
        assert json.loads(await page.text("#dl-payload")) == {"refund": 1, "reason": "late"}
        assert "HTTP 500" in await page.text("#dl-attempts")
        # Each attempt's record (schema 024): its phases as a bar, who
        # answered, what it answered.
        await page.present("#dl-details .timing span.ph-wait")
        details = await page.text("#dl-details")
        assert "Attempt 1: HTTP 500" in details and "from 127.0.0.1" in details, details
        assert "first byte" in details and "content-length" in details, details
        width_set = "document.querySelector('#dl-details .timing span').style.width.endsWith('%')"
        assert await page.eval(width_set)
        await _fits(page)

        # The suggested action opens the editor: fix the URL, more attempts.
        await page.click('header nav a[href="#/"]')
        await page.click(f'a[data-edit="{partner}"]')
        await page.wait("document.querySelector('#ed-url').value.includes('/partner')")
        await page.wait("!document.querySelector('#ed-catalogue').hidden")
        assert "A refund went out" in await page.text("#ed-catalogue")
        await _fits(page)
        await page.eval("document.querySelector('#ed-url').value = ''")
        await page.type("#ed-url", receiver.url("/partner-fixed"))
        await page.eval("document.querySelector('#ed-max_attempts').value = ''")
        await page.type("#ed-max_attempts", "4")
        if width == 1280:
            await page.screenshot(tmp_path / "console-editor.png")
        await page.click("#ed-form button[type=submit]")
        await page.wait(f"location.hash === '#/endpoints/{partner}'")
        await page.wait("document.querySelector('#ep-url').innerText.includes('partner-fixed')")
        row = await conn.fetchrow("SELECT url, max_attempts, secret FROM endpoints WHERE id = $1",
                                  partner)  # fmt: skip
        assert row["url"].endswith("/partner-fixed") and row["max_attempts"] == 4
        assert row["secret"] == secret  # same endpoint, same secret

        # Replay the page of dead letters: select all, one click.
        await page.click('header nav a[href="#/dead-letters"]')
        await page.wait("document.querySelectorAll('tr[data-dead-letter]').length === 3")
        await page.click("#dl-all")
        await page.wait("document.querySelector('#dl-replay-selected').innerText.includes('3')")
        await page.click("#dl-replay-selected")
        await page.wait("document.querySelector('#dl-message').innerText.includes('Requeued 3')")
        await _until(conn, "SELECT count(*) = 9 FROM webhook_queue WHERE status = 'delivered'")
        assert len(receiver.requests_to("/partner-fixed")) == 3
        await _fits(page)

        # A replayed delivery keeps its attempts from before the replay, and
        # says where its fresh budget starts (issue 37: "1 of 1", no trace).
        await page.eval(f"location.hash = '#/delivery/{dead}'")
        await page.wait("document.querySelector('#dl-facts').innerText"
                        ".includes('since it was replayed, after 1 earlier')")  # fmt: skip
        attempts = await page.text("#dl-attempts")
        assert "HTTP 500" in attempts and "HTTP 200" in attempts, attempts
        order = [attempts.index(t) for t in ("HTTP 500", "replayed: a fresh budget", "HTTP 200")]
        assert order == sorted(order), attempts
        await page.eval("location.hash = '#/events/refund-1'")
        await page.wait("document.querySelector('#deliveries').innerText"
                        ".includes('since it was replayed, after 1 earlier')")  # fmt: skip

        # An application: create, a quota, a token shown once, a portal link opened.
        await page.click('header nav a[href="#/applications"]')
        await page.type("#app-id", "acme")
        await page.type("#app-name", "Acme Corp")
        await page.click("#app-create button[type=submit]")
        await page.present('tr[data-app="acme"]')
        await page.eval("document.querySelector('form[data-quota=\"acme\"] input').value = '5'")
        await page.click('form[data-quota="acme"] button')
        await page.wait("document.querySelector('#app-shown').innerText.includes('5 endpoints')")
        assert await conn.fetchval("SELECT max_endpoints FROM applications WHERE id = 'acme'") == 5
        await page.click('button[data-token="acme"]')
        await page.wait("(document.querySelector('#app-token') || {}).value?.startsWith('dtk_')")
        await page.click('button[data-link="acme"]')
        await page.present("#app-link")
        await _fits(page)
        if width == 1280:
            await page.screenshot(tmp_path / "console-applications.png")
        link = await page.eval("document.querySelector('#app-link').href")
        assert link.startswith(f"{console}/portal/login?code=")
        await page.goto(link)
        await page.wait("document.querySelector('#app')?.innerText === 'Acme Corp'")
        assert page.errors == []
    if width == 1280:
        for name in ("console.png", "console-deliveries.png", "console-editor.png",
                     "console-applications.png"):  # fmt: skip
            _keep(tmp_path / name, name)
