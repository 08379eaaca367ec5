"""A headless Chromium a test can click through, over the DevTools protocol.

Debian's `chromium` started with a remote-debugging port, driven through
aiohttp's websocket client (already a dependency): navigate, wait for a
condition in the page, click an element where it is drawn (real mouse
events at its centre, so a hidden or covered button fails like it would for
a person), type. Every wait is bounded. Errors the page raises or logs
(including CSP refusals) are collected for the test to assert on.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import shutil
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
FLAGS = [
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
    "--remote-debugging-port=0", "--remote-allow-origins=*",
]  # fmt: skip
WAIT_S = 20.0
# How long an element must stay put before it is clicked, and how many
# looks it gets to do so.
STILL_S = 0.05
STILL_LOOKS = 40
# How long a click is given to show before it is made again (click_until).
RECLICK_S = 4.0


class BrowserError(AssertionError):
    pass


class Page:
    def __init__(self, ws: aiohttp.ClientWebSocketResponse) -> None:
        self._ws = ws
        self._ids = itertools.count(1)
        self._waiting: dict[int, asyncio.Future[dict[str, Any]]] = {}
        self.errors: list[str] = []
        self._reader = asyncio.create_task(self._read(), name="cdp-reader")

    async def _read(self) -> None:
        async for msg in self._ws:
            if msg.type != aiohttp.WSMsgType.TEXT:
                continue
            doc = json.loads(msg.data)
            if "id" in doc:
                fut = self._waiting.pop(doc["id"], None)
                if fut is not None and not fut.done():
                    fut.set_result(doc)
            elif doc.get("method") == "Runtime.exceptionThrown":
                details = doc["params"]["exceptionDetails"]
                self.errors.append(details.get("exception", {}).get("description", str(details)))
            elif doc.get("method") == "Log.entryAdded":
                entry = doc["params"]["entry"]
                # Network answers (the sign-in page's 401, a favicon's 404)
                # are the server's business; the page's own errors are ours.
                if entry["level"] == "error" and entry.get("source") != "network":
                    self.errors.append(f"{entry.get('source')}: {entry['text']}")
            elif doc.get("method") == "Runtime.consoleAPICalled":
                if doc["params"]["type"] == "error":
                    self.errors.append(str(doc["params"]["args"]))

    async def send(self, method: str, **params: Any) -> dict[str, Any]:
        n = next(self._ids)
        fut: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        self._waiting[n] = fut
        await self._ws.send_str(json.dumps({"id": n, "method": method, "params": params}))
        doc = await asyncio.wait_for(fut, WAIT_S)
        if "error" in doc:
            raise BrowserError(f"{method}: {doc['error']}")
        result: dict[str, Any] = doc["result"]
        return result

    async def eval(self, expression: str) -> Any:
        doc = await self.send(
            "Runtime.evaluate", expression=expression, returnByValue=True, awaitPromise=True
        )
        if "exceptionDetails" in doc:
            raise BrowserError(f"{expression}: {doc['exceptionDetails']}")
        return doc["result"].get("value")

    async def goto(self, url: str) -> None:
        await self.send("Page.navigate", url=url)
        await self.wait("document.readyState === 'complete'")

    async def wait(self, predicate: str, timeout: float = WAIT_S) -> Any:
        """Polls a JavaScript expression until it is truthy; returns its value."""
        deadline = asyncio.get_running_loop().time() + timeout
        while True:
            with contextlib.suppress(BrowserError):  # mid-navigation: try again
                value = await self.eval(predicate)
                if value:
                    return value
            if asyncio.get_running_loop().time() > deadline:
                text = await self.text("body")
                raise BrowserError(f"timed out waiting for {predicate!r}; page: {text[:1500]}")
            await asyncio.sleep(0.1)

    async def present(self, selector: str, timeout: float = WAIT_S) -> None:
        """Waits until an element matching `selector` is in the page."""
        await self.wait(f"document.querySelector({json.dumps(selector)}) !== null", timeout)

    async def text(self, selector: str) -> str:
        value = await self.eval(
            f"(document.querySelector({json.dumps(selector)}) || {{}}).innerText || ''"
        )
        return str(value)

    async def click(self, selector: str) -> None:
        """A real click at the element's centre, once it is drawn and enabled."""
        sel = json.dumps(selector)
        where = f"""(() => {{
                const el = document.querySelector({sel});
                if (!el || el.disabled) return null;
                el.scrollIntoView({{block: "center"}});
                const r = el.getBoundingClientRect();
                return r.width && r.height ? [r.x + r.width / 2, r.y + r.height / 2] : null;
            }})()"""
        box = await self.wait(where)
        # A page still drawing (a poll's answer growing a card or a table)
        # moves the element between finding it and the click, and the
        # click lands beside it (seen under CI load): clicked once it has
        # stayed put for one look, within a bounded wait (each look as
        # long as all of them: an element gone for good fails in seconds).
        for _ in range(STILL_LOOKS):
            await asyncio.sleep(STILL_S)
            again = await self.wait(where, STILL_S * STILL_LOOKS)
            if again == box:
                break
            box = again
        x, y = box
        hit = await self.eval(
            f"document.querySelector({sel}).contains(document.elementFromPoint({x}, {y}))"
        )
        if not hit:
            raise BrowserError(f"{selector} is covered by another element")
        for kind in ("mouseMoved", "mousePressed", "mouseReleased"):
            await self.send(
                "Input.dispatchMouseEvent", type=kind, x=x, y=y, button="left", clickCount=1
            )

    async def click_until(self, selector: str, predicate: str, tries: int = 3) -> None:
        """Clicks, then waits for `predicate`; clicks again (up to `tries`
        in all) when nothing came of it within RECLICK_S. A page that
        redraws its cards from a poll can replace the element between the
        press and the release, and then no click happens at all (seen under
        CI load: the card stayed, with no notice and no question)."""
        for _ in range(tries - 1):
            await self.click(selector)
            with contextlib.suppress(BrowserError):
                await self.wait(predicate, RECLICK_S)
                return
            if await self.eval(f"document.querySelector({json.dumps(selector)}) === null"):
                break  # the element went: nothing to click again
        else:
            await self.click(selector)
        await self.wait(predicate)

    async def type(self, selector: str, text: str) -> None:
        await self.click(selector)
        await self.send("Input.insertText", text=text)

    async def choose(self, selector: str, value: str) -> None:
        """Picks an option of a <select> as a person's choice would: the
        value changes and the page hears `change` (a native popup cannot be
        clicked through the protocol)."""
        sel, val = json.dumps(selector), json.dumps(value)
        await self.wait(f"document.querySelector({sel}) && !document.querySelector({sel}).disabled")
        ok = await self.eval(
            f"""(() => {{
                const el = document.querySelector({sel});
                if (![...el.options].some(o => o.value === {val})) return false;
                el.focus();
                el.value = {val};
                el.dispatchEvent(new Event("change", {{bubbles: true}}));
                return true;
            }})()"""
        )
        if not ok:
            raise BrowserError(f"{selector} has no option {value!r}")

    async def overflowing(self) -> list[str]:
        """What sticks out of the window sideways (the page scrolls, or a
        part of it is cut off): the first few elements, or nothing."""
        found = await self.eval(
            """(() => {
                const out = [...document.body.querySelectorAll("*")].filter(el => {
                    const r = el.getBoundingClientRect();
                    return r.width > 0 && (r.right > innerWidth + 0.5 || r.left < -0.5);
                }).slice(0, 3).map(el => `${el.tagName.toLowerCase()}#${el.id}.${el.className}`);
                if (document.documentElement.scrollWidth > innerWidth) out.unshift("document");
                return out;
            })()"""
        )
        return list(found)

    async def resize(self, width: int, height: int) -> None:
        await self.send(
            "Emulation.setDeviceMetricsOverride",
            width=width, height=height, deviceScaleFactor=1, mobile=width < 800,
        )  # fmt: skip

    async def screenshot(self, path: Path) -> None:
        import base64

        doc = await self.send("Page.captureScreenshot", format="png")
        path.write_bytes(base64.b64decode(doc["data"]))

    async def close(self) -> None:
        self._reader.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self._reader


@contextlib.asynccontextmanager
async def browser(profile: Path) -> AsyncIterator[Page]:
    """A fresh Chromium (its own profile, so no cookies carry over) and its page."""
    assert CHROMIUM is not None
    port_file = profile / "DevToolsActivePort"
    port_file.unlink(missing_ok=True)  # a reused profile's would name a dead port
    proc = await asyncio.create_subprocess_exec(
        CHROMIUM, *FLAGS, f"--user-data-dir={profile}", "--window-size=1280,900", "about:blank",
        stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.DEVNULL,
    )  # fmt: skip
    try:
        # Bounded: 60 s. A start beside six busy test workers took longer
        # than the 15 s this allowed before (CI, 2026-12-03).
        for _ in range(1200):
            if port_file.exists() and port_file.read_text().count("\n") >= 1:
                break
            if proc.returncode is not None:
                raise AssertionError(f"chromium exited with {proc.returncode} before it listened")
            await asyncio.sleep(0.05)
        port = int(port_file.read_text().split()[0])
        async with aiohttp.ClientSession() as session:
            async with session.get(f"http://127.0.0.1:{port}/json/list") as r:
                targets = await r.json()
            target = next(t for t in targets if t["type"] == "page" and t["url"] == "about:blank")
            async with session.ws_connect(
                target["webSocketDebuggerUrl"], max_msg_size=64 * 1024 * 1024
            ) as ws:
                page = Page(ws)
                for domain in ("Page.enable", "Runtime.enable", "Log.enable"):
                    await page.send(domain)
                try:
                    yield page
                finally:
                    await page.close()
    finally:
        proc.terminate()
        try:
            await asyncio.wait_for(proc.wait(), 10)
        except TimeoutError:
            proc.kill()
            await proc.wait()
