"""The customer's day in the portal (issue 25), in a real headless browser
at 1280 and 375 px wide: the application's name, plain words for an
endpoint's state, editing and deleting an endpoint, finding a delivery by
event id and date and reading what was sent, and "resend everything that
failed since…".

With SCREENSHOTS_DIR=DIR the 1280 px run saves docs/guide/portal-day.png."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import asyncpg
import pytest

from tests.browser import CHROMIUM, Page, browser
from tests.e2e import test_dashboard as dashboard
from tests.e2e.test_portal import _admin, _no_other_tenant, _sign_in, link
from tests.receivers import Receiver, status

pytestmark = pytest.mark.skipif(
    CHROMIUM is None, reason="chromium is not installed (.ci/run installs it)"
)

console = dashboard.console
_until = dashboard._until
__all__ = ["link"]  # the fixture, used by name


async def _fits(page: Page) -> None:
    assert await page.overflowing() == []


@pytest.mark.parametrize("width", [1280, 375])
async def test_a_customers_day_in_the_portal(
    conn: asyncpg.Connection, receiver: Receiver, console: str, link: str, tmp_path: Path,
    width: int,
) -> None:  # fmt: skip
    receiver.routes["/acme-partner"] = status(500)
    partner = (await _admin(console, "POST", "/v1/endpoints",
                            {"app": "acme", "url": receiver.url("/acme-partner"),
                             "name": "Partner", "max_attempts": 1,
                             "failure_threshold": 100}))["id"]  # fmt: skip
    for i in range(3):
        event = {"app": "acme", "event_type": "order.paid", "event_id": f"acme-order-{i}",
                 "payload": {"order": i, "total": 12.5}}  # fmt: skip
        await _admin(console, "POST", "/v1/events", event)
    await _until(conn, "SELECT count(*) = 3 FROM webhook_queue WHERE status = 'dead_letter'")

    async with browser(tmp_path / "profile") as page:
        await page.resize(width, 900)
        await _sign_in(page, link, console)
        assert await page.text("#app") == "Acme"  # its name, not its id
        card = f'article[data-endpoint="{partner}"]'
        await page.wait(f"document.querySelector('{card}')?.innerText.includes('Failing')")
        shown = await page.text(card)
        assert "we retry automatically" in shown
        assert "circuit" not in shown.lower() and " of " not in await page.text("#deliveries")
        await _fits(page)

        # Find one delivery by its event id and today's date; read what was sent.
        await page.type("#f-event", "acme-order-1")
        await page.eval("document.querySelector('#f-since').value = "
                        "new Date(Date.now() - new Date().getTimezoneOffset() * 60e3)"
                        ".toISOString().slice(0, 10)")  # fmt: skip
        await page.click("#f-search")
        rows = "[...document.querySelectorAll('#deliveries tr[data-delivery]')]"
        await page.wait(f"{rows}.length === 1 && {rows}[0].innerText.includes('acme-order-1')")
        delivery = int(await page.eval(f"{rows}[0].dataset.delivery"))
        assert "failed" in await page.eval(f"{rows}[0].innerText")
        await page.click(f'button[data-open="{delivery}"]')
        await page.present(f'pre[data-payload="{delivery}"]')
        sent = await page.text(f'pre[data-payload="{delivery}"]')
        assert json.loads(sent) == {"order": 1, "total": 12.5}
        await _fits(page)
        if width == 1280:
            await page.screenshot(tmp_path / "portal-day.png")

        # Fix the URL in place: same endpoint, same secret.
        secret = await conn.fetchval("SELECT secret FROM endpoints WHERE id = $1", partner)
        await page.click(f'button[data-edit="{partner}"]')
        url_field = f"#edit-url-{partner}"
        await page.eval(f"document.querySelector('{url_field}').value = ''")
        await page.type(url_field, receiver.url("/acme-partner-fixed"))
        await _fits(page)
        await page.click(f'form[data-edit-form="{partner}"] button[type=submit]')
        await page.wait(f"document.querySelector('{card}').innerText.includes('partner-fixed')")
        row = await conn.fetchrow("SELECT url, secret FROM endpoints WHERE id = $1", partner)
        assert row["url"].endswith("/acme-partner-fixed") and row["secret"] == secret

        # Resend everything that failed since an hour ago.
        await page.eval(
            "(() => { const off = new Date().getTimezoneOffset() * 60e3;"
            " const t = new Date(Date.now() - 3600e3 - off);"
            " document.querySelector('#resend-since').value = t.toISOString().slice(0, 19); })()"
        )
        await page.click("#resend-go")
        await page.wait("document.querySelector('#notice').innerText.includes('Resending 3')")
        delivered = (
            "SELECT count(*) = 3 FROM webhook_queue WHERE status = 'delivered' AND endpoint_id = $1"
        )
        await _until(conn, delivered, partner)
        assert len(receiver.requests_to("/acme-partner-fixed")) == 3

        # Delete it: nothing is on its way any more, so no question is asked.
        await page.click_until(f'button[data-delete="{partner}"]',
                               f"document.querySelector('{card}') === null")  # fmt: skip
        assert await conn.fetchval(
            "SELECT deleted_at IS NOT NULL FROM endpoints WHERE id = $1", partner
        )
        await _no_other_tenant(page)
        await _fits(page)
        assert page.errors == []
    target = os.environ.get("SCREENSHOTS_DIR")
    if target and width == 1280:
        shutil.copyfile(tmp_path / "portal-day.png", Path(target) / "portal-day.png")
