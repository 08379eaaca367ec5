"""The customer portal in a real headless browser (Debian's chromium),
clicked through like a customer would, on a live `dispatcher run --http`
worker delivering to a real receiver on 127.0.0.1, with a second
application in the same database whose things must never show."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import aiohttp
import asyncpg
import pytest

from dispatcher.core.signing import sign
from tests.browser import CHROMIUM, Page, browser
from tests.e2e import test_dashboard as dashboard
from tests.helpers import cli
from tests.receivers import Receiver, bodies, status

pytestmark = pytest.mark.skipif(
    CHROMIUM is None, reason="chromium is not installed (.ci/run installs it)"
)

console = dashboard.console  # `dispatcher run --http` with the admin token
_until = dashboard._until
OTHER_URL_PATH = "/globex-private-hook"
OTHER_EVENT = "globex-invoice-7731"


async def _admin(base: str, method: str, path: str, body: Any = None) -> Any:
    headers = {"Authorization": f"Bearer {dashboard.TOKEN}"}
    async with aiohttp.ClientSession() as s:
        async with s.request(method, base + path, json=body, headers=headers) as r:
            assert r.status < 300, (path, r.status, await r.text())
            return await r.json()


@pytest.fixture
async def link(db_url: str, conn: asyncpg.Connection, receiver: Receiver, console: str) -> str:
    """Applications acme (empty) and globex (an endpoint, a delivered event);
    acme's portal sign-in link, made by the CLI."""
    await _admin(console, "POST", "/v1/applications", {"id": "acme", "name": "Acme"})
    await _admin(console, "POST", "/v1/applications", {"id": "globex"})
    hook = {"app": "globex", "url": receiver.url(OTHER_URL_PATH), "name": "Globex hook"}
    await _admin(console, "POST", "/v1/endpoints", hook)
    await _admin(console, "POST", "/v1/events",
                 {"app": "globex", "event_type": "invoice.sent", "event_id": OTHER_EVENT,
                  "payload": {"n": 1}})  # fmt: skip
    await _until(conn, "SELECT count(*) = 1 FROM webhook_queue WHERE status = 'delivered'")
    args = ("app", "portal-link", "acme", "--base-url", console, "--json")
    code, out, err = await cli(db_url, *args)
    assert code == 0, err
    url: str = json.loads(out)["url"]
    assert url.startswith(f"{console}/portal/login?code=")
    return url


async def _sign_in(page: Page, link: str, base: str) -> None:
    await page.goto(link)
    await page.wait("document.querySelector('#updated').innerText.startsWith('updated')")
    # The code is gone from the address bar (and from the page).
    assert await page.eval("location.href") == f"{base}/portal"
    code = link.partition("code=")[2]
    assert code not in await page.eval("document.documentElement.outerHTML")
    assert await page.eval("localStorage.length + sessionStorage.length") == 0


async def _no_other_tenant(page: Page) -> None:
    seen = await page.eval("document.documentElement.outerHTML + document.body.innerText")
    for secret in (OTHER_URL_PATH, OTHER_EVENT, "Globex hook", "invoice.sent"):
        assert secret not in seen


async def _add_endpoint(page: Page, url: str, types: str, name: str) -> str:
    """Through the form; the secret it shows once."""
    await page.click("#add-toggle")
    await page.type("#add-url", url)
    await page.type("#add-types", types)
    await page.type("#add-name", name)
    await page.click("#add-form button[type=submit]")
    await page.wait("!document.querySelector('#secret').hidden")
    secret: str = await page.eval("document.querySelector('#secret-value').value")
    assert secret.startswith("whsec_")
    assert "shown only now" in await page.text("#secret")
    return secret


async def _saved(page: Page) -> None:
    await page.click("#secret-copy")
    await page.wait("document.querySelector('#secret-copy').innerText === 'Copied'")
    await page.click("#secret-done")
    await page.wait("document.querySelector('#secret').hidden")
    assert await page.eval("document.querySelector('#secret-value').value") == ""


async def _test_event(page: Page, endpoint: int, outcome: str) -> tuple[str, int]:
    """Clicks "Send test event" and follows it in the notice to `outcome`:
    the event id and its delivery's id."""
    before = await page.eval("document.querySelector('#notice code')?.innerText ?? ''")
    await page.click(f'button[data-test="{endpoint}"]')
    notice = "document.querySelector('#notice')"
    await page.wait(f"{notice}.dataset.status === '{outcome}'"
                    f" && {notice}.querySelector('code').innerText !== '{before}'", 30)  # fmt: skip
    event_id: str = await page.eval(f"{notice}.querySelector('code').innerText")
    row = f"document.querySelector('#deliveries tr[data-status=\"{outcome}\"]')"
    await page.wait(f"{row} && {row}.innerText.includes('{event_id}')")
    delivery = int(await page.eval(f"{row}.dataset.delivery"))
    return event_id, delivery


async def _attempts(page: Page, delivery: int) -> str:
    """Opens a delivery's details: its attempts, as shown."""
    await page.click(f'button[data-open="{delivery}"]')
    attempts = f'#deliveries tr[data-attempts-of="{delivery}"] ol.attempts'
    await page.present(attempts)
    return await page.text(attempts)


def _signed_with(receiver: Receiver, event_id: str, secret: str) -> bool:
    (got,) = [r for r in receiver.received if r.headers.get("webhook-id") == event_id]
    expected = sign(secret, event_id, int(got.headers["webhook-timestamp"]), got.body)
    return expected.split()[0] in got.headers["webhook-signature"].split()


async def test_customer_adds_an_endpoint_tests_it_and_replays_a_dead_letter(
    conn: asyncpg.Connection, receiver: Receiver, console: str, link: str, tmp_path: Path
) -> None:
    async with browser(tmp_path / "profile") as page:
        await _sign_in(page, link, console)
        assert "No endpoints yet" in await page.text("#endpoints")

        # Add an endpoint: its secret is shown once, with a copy button.
        secret = await _add_endpoint(
            page, receiver.url("/acme-orders"), "order.paid, order.refunded", "Orders"
        )
        await _saved(page)
        orders = await conn.fetchval(
            "SELECT id FROM endpoints WHERE name = 'Orders' AND application_id = 'acme'"
        )
        card = f'article[data-endpoint="{orders}"]'
        await page.present(card)
        shown = await page.text(card)
        assert receiver.url("/acme-orders") in shown and "order.refunded" in shown
        assert "Healthy" in shown and "enabled" in shown

        # A test event arrives, signed with that secret; its attempt shows.
        event_id, delivery = await _test_event(page, orders, "delivered")
        assert _signed_with(receiver, event_id, secret)
        attempts = await _attempts(page, delivery)
        assert "HTTP 200" in attempts and " ms" in attempts
        # Each attempt's record: who answered, its phases as a bar.
        assert "from 127.0.0.1" in attempts, attempts
        await page.present(f'#deliveries tr[data-attempts-of="{delivery}"] .timing span')
        # The card's figures come from the same attempts.
        await page.wait(f"document.querySelector('{card}').innerText.includes('100% of 1 attempt')")

        # Disable, enable.
        await page.click(f'button[data-disable="{orders}"]')
        await page.wait(f"document.querySelector('{card}').dataset.enabled === 'false'")
        assert await conn.fetchval("SELECT enabled FROM endpoints WHERE id = $1", orders) is False
        assert "disabled" in await page.text(card)
        await page.click(f'button[data-enable="{orders}"]')
        await page.wait(f"document.querySelector('{card}').dataset.enabled === 'true'")
        assert await conn.fetchval("SELECT enabled FROM endpoints WHERE id = $1", orders) is True

        # Rotate, after a confirmation: the new secret is shown once and signs.
        await page.click(f'button[data-rotate="{orders}"]')
        await page.click(f'button[data-rotate-confirm="{orders}"]')
        await page.wait("!document.querySelector('#secret').hidden")
        rotated: str = await page.eval("document.querySelector('#secret-value').value")
        assert rotated.startswith("whsec_") and rotated != secret
        assert "New signing secret for Orders" in await page.text("#secret")
        await _saved(page)
        await asyncio.sleep(2)  # a worker reads endpoints every second (DISPATCHER_REFRESH_S)
        event_2, _ = await _test_event(page, orders, "delivered")
        # Both sign during the grace period the page announced.
        assert _signed_with(receiver, event_2, rotated) and _signed_with(receiver, event_2, secret)
        assert "previous secret also signs" in await page.text("#secret-note")

        # An endpoint that refuses (400, one attempt): a dead letter, replayed by a click.
        receiver.routes["/acme-partner"] = status(400)
        partner = (await _admin(console, "POST", "/v1/endpoints",
                                {"app": "acme", "url": receiver.url("/acme-partner"),
                                 "name": "Partner", "max_attempts": 1}))["id"]  # fmt: skip
        await page.present(f'button[data-test="{partner}"]')
        dead_event, dead = await _test_event(page, partner, "dead_letter")
        await page.present("#show-dead")
        assert "HTTP 400" in await _attempts(page, dead)
        await page.screenshot(tmp_path / "portal.png")

        # Filter by status: only dead letters, then only delivered ones.
        await page.click("#show-dead")
        rows = "[...document.querySelectorAll('#deliveries tr[data-delivery]')]"
        await page.wait(f"{rows}.length === 1 && {rows}[0].dataset.status === 'dead_letter'")
        assert await page.eval("document.querySelector('#f-status').value") == "dead_letter"
        receiver.routes["/acme-partner"] = status(200)
        await page.click(f'button[data-replay="{dead}"]')
        await page.wait("document.querySelector('#notice').dataset.status === 'delivered'", 30)
        assert dead_event in await page.text("#notice")
        await page.wait(f"{rows}.length === 0")
        assert "No deliveries match" in await page.text("#deliveries-empty")
        assert (
            await conn.fetchval("SELECT status FROM webhook_queue WHERE id = $1", dead)
            == "delivered"
        )
        await page.choose("#f-status", "delivered")
        await page.wait(
            f"{rows}.length === 3 && {rows}.every(r => r.dataset.status === 'delivered')"
        )
        await page.choose("#f-endpoint", str(partner))
        await page.wait(f"{rows}.length === 1 && {rows}[0].dataset.delivery === '{dead}'")

        # Nothing of the other application, anywhere on the page or through its API.
        await _no_other_tenant(page)
        other = await conn.fetchval("SELECT id FROM endpoints WHERE application_id = 'globex'")
        assert await page.eval(f"fetch('/v1/endpoints/{other}').then(r => r.status)") == 404
        assert await page.eval(
            f"fetch('/v1/deliveries?event_id={OTHER_EVENT}').then(r => r.json())"
        ) == {"deliveries": [], "next_cursor": None}  # fmt: skip

        # A state change without the page's CSRF token: 403, and nothing changed.
        for headers in ("{}", "{'X-CSRF-Token': 'guess'}"):
            answer = await page.eval(
                f"fetch('/v1/endpoints/{orders}/disable', {{method: 'POST', headers: {headers}}})"
                ".then(r => r.status)"
            )
            assert answer == 403
        assert await conn.fetchval("SELECT enabled FROM endpoints WHERE id = $1", orders) is True

        # The code worked once.
        async with aiohttp.ClientSession() as s, s.get(link, allow_redirects=False) as r:
            assert r.status == 401 and "not valid" in await r.text()
            assert "Set-Cookie" not in r.headers
        assert page.errors == []

        # Sign out: the session is over.
        await page.click("#signout")
        await page.present("#signin")
        assert "Sign in with the link" in await page.text("#signin")
        assert await page.eval("fetch('/v1/endpoints').then(r => r.status)") == 401
        await page.goto(link)
        assert "not valid" in await page.text("#signin")
        assert page.errors == []


async def test_narrow_screen_and_text_only(
    conn: asyncpg.Connection, receiver: Receiver, console: str, link: str, tmp_path: Path
) -> None:
    long_url = receiver.url("/a-rather-long-path/for/a/narrow/screen/" + "x" * 80 + "?tenant=acme")
    name = '<img id="pwned" src="x">Shop'
    async with browser(tmp_path / "profile") as page:
        await page.resize(375, 740)
        await _sign_in(page, link, console)
        assert await page.overflowing() == []
        await _add_endpoint(page, long_url, "a.very.long.event.type.name.for.a.narrow.screen", name)
        assert await page.overflowing() == []  # the secret, in full, fits
        await _saved(page)
        endpoint = await conn.fetchval("SELECT id FROM endpoints WHERE application_id = 'acme'")
        await page.present(f'article[data-endpoint="{endpoint}"]')
        # A name is text wherever it shows, never markup.
        assert name in await page.text("#endpoints")
        assert await page.eval("document.querySelector('#pwned') === null")
        _, delivery = await _test_event(page, endpoint, "delivered")
        assert "HTTP 200" in await _attempts(page, delivery)
        assert await page.overflowing() == []
        await page.click(f'button[data-rotate="{endpoint}"]')
        await page.present(f'button[data-rotate-confirm="{endpoint}"]')
        assert await page.overflowing() == []
        await _no_other_tenant(page)
        await page.screenshot(tmp_path / "portal-375.png")
        await page.eval("document.querySelector('#deliveries').scrollIntoView()")
        assert await page.overflowing() == [] and await page.eval("window.scrollX") == 0
        await page.screenshot(tmp_path / "portal-375-deliveries.png")
        assert page.errors == []


async def test_sign_in_refuses_a_bad_code_and_a_missing_session(
    console: str, tmp_path: Path
) -> None:
    async with browser(tmp_path / "profile") as page:
        await page.goto(f"{console}/portal")
        assert "Sign in with the link you were given" in await page.text("#signin")
        await page.goto(f"{console}/portal/login?code=<b>forged</b>")
        assert "not valid" in await page.text("#signin")
        assert await page.eval("document.querySelector('#signin b') === null")
        assert await page.eval("fetch('/v1/endpoints').then(r => r.status)") == 401
        assert page.errors == []


async def test_customer_subscribes_from_the_event_type_catalogue(
    conn: asyncpg.Connection, receiver: Receiver, console: str, link: str, tmp_path: Path
) -> None:
    """The form offers the catalogue (catalogue-wide and acme's own types,
    never globex's) with descriptions and example payloads; ticking a type
    puts it in the event types field."""
    paid = {"type": "object", "properties": {"amount": {"type": "number"}},
            "examples": [{"amount": 42}]}  # fmt: skip
    body = {"name": "order.paid", "description": "An order was paid", "schema": paid}
    await _admin(console, "POST", "/v1/event-types", body)
    await _admin(console, "POST", "/v1/event-types", {"name": "acme.special", "app": "acme"})
    await _admin(console, "POST", "/v1/event-types", {"name": "globex.secret", "app": "globex"})
    async with browser(tmp_path / "profile") as page:
        await _sign_in(page, link, console)
        await page.click("#add-toggle")
        await page.wait("!document.querySelector('#catalogue').hidden")
        shown = await page.text("#catalogue")
        assert "order.paid" in shown and "An order was paid" in shown and "acme.special" in shown
        assert "globex.secret" not in shown
        await page.click("#catalogue details summary")
        example = await page.eval(
            "document.querySelector('[data-example=\"order.paid\"]').innerText"
        )
        assert json.loads(example) == {"amount": 42}

        await page.type("#add-url", receiver.url("/from-catalogue"))
        await page.click('input[data-type="order.paid"]')
        await page.click('input[data-type="acme.special"]')
        await page.wait("document.querySelector('#add-types').value === 'order.paid, acme.special'")
        await page.click('input[data-type="acme.special"]')  # and unticked again
        await page.wait("document.querySelector('#add-types').value === 'order.paid'")
        await page.click("#add-form button[type=submit]")
        await page.wait("!document.querySelector('#secret').hidden")
    types = await conn.fetchval(
        "SELECT event_types FROM endpoints WHERE application_id = 'acme' AND url LIKE '%catalogue'"
    )
    assert types == ["order.paid"]


async def test_customer_edits_its_postback_and_runs_a_test_shot(
    conn: asyncpg.Connection, receiver: Receiver, console: str, link: str, tmp_path: Path
) -> None:
    """Issue 24: the template edited in the portal, and "Test now" showing
    the partner's answer (status, latency, body), with nothing stored."""
    receiver.routes["/acme-pb"] = bodies('{"result": "success", "partner": "acme-net"}')
    ep = (await _admin(console, "POST", "/v1/endpoints",
                       {"app": "acme", "url": receiver.url("/acme-pb?c={click_id|default:none}"),
                        "method": "GET", "name": "Partner"}))["id"]  # fmt: skip
    queued = await conn.fetchval("SELECT count(*) FROM webhook_queue")
    async with browser(tmp_path / "profile") as page:
        await _sign_in(page, link, console)
        card = f'article[data-endpoint="{ep}"]'
        await page.present(f'button[data-edit="{ep}"]')
        await page.click(f'button[data-edit="{ep}"]')
        await page.present(f'select[data-edit-style="{ep}"]')
        template = receiver.url("/acme-pb?c=#click_id|default:none#&s=#status|default:x#")
        await page.eval(
            f"(() => {{ const u = document.querySelector('input[data-edit-url=\"{ep}\"]');"
            f" u.value = '{template}';"
            f" document.querySelector('select[data-edit-style=\"{ep}\"]').value = 'hash';"
            f" document.querySelector('textarea[data-edit-map=\"{ep}\"]').value ="
            f' \'{{"status": {{"x": "0"}}}}\'; }})()'
        )
        await page.click(f'button[data-edit-save="{ep}"]')
        await page.wait(f"!document.querySelector('select[data-edit-style=\"{ep}\"]')")
        row = await conn.fetchrow("SELECT macro_style, value_map FROM endpoints WHERE id = $1", ep)
        assert row["macro_style"] == "hash" and json.loads(row["value_map"]) == {
            "status": {"x": "0"}
        }
        await page.click(f'button[data-shot="{ep}"]')
        shot = f"document.querySelector('[data-shot-result=\"{ep}\"]')"
        await page.wait(f"{shot} && {shot}.innerText.includes('acme-net')")
        shown = await page.text(card)
        assert "HTTP 200" in shown and " ms" in shown and "?c=none&s=x" in shown
        await page.screenshot(tmp_path / "portal-shot.png")
    assert [r.query for r in receiver.requests_to("/acme-pb")] == ["c=none&s=x"]
    assert await conn.fetchval("SELECT count(*) FROM webhook_queue") == queued
