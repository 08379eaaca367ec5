"""The official JavaScript `svix` SDK (npm `svix`, pinned by
tests/sdk/js/package-lock.json) runs tests/sdk/js/flow.mjs under node
against a live `dispatcher run --http`: application, event type, two
endpoints (one on node's own receiver, one on this test's), a message
verified with the SDK's `Webhook` class, its attempts, the errors the SDK
parses, pages, secret rotation and the app portal link. node_modules is
installed with `npm ci` from the lockfile when missing."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import uuid
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from svix.webhooks import Webhook

from tests.receivers import Receiver
from tests.sdk.conftest import Server

JS = Path(__file__).resolve().parent / "js"
NODE = shutil.which("node")
NPM = shutil.which("npm")

pytestmark = pytest.mark.skipif(NODE is None or NPM is None, reason="node/npm not installed")


async def _run(*argv: str, env: dict[str, str], timeout: float) -> tuple[int, str, str]:
    proc = await asyncio.create_subprocess_exec(
        *argv, cwd=JS, env=env,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    try:
        out, err = await asyncio.wait_for(proc.communicate(), timeout)
    except TimeoutError:
        proc.kill()
        await proc.wait()
        raise
    assert proc.returncode is not None
    return proc.returncode, out.decode(), err.decode()


async def _node_modules() -> None:
    """`npm ci` from the committed lockfile, once (works offline from npm's cache)."""
    if (JS / "node_modules" / "svix" / "package.json").exists():
        return
    assert NPM is not None
    env = {k: v for k, v in os.environ.items() if not k.startswith("DISPATCHER_")}
    code, out, err = await _run(NPM, "ci", "--no-audit", "--no-fund", env=env, timeout=300)
    assert code == 0, f"npm ci failed:\n{out[-2000:]}\n{err[-2000:]}"


async def test_the_javascript_sdk_core_flow(server: Server, receiver: Receiver) -> None:
    await _node_modules()
    assert NODE is not None
    env = {k: v for k, v in os.environ.items() if not k.startswith("DISPATCHER_")}
    env.update(SVIX_SERVER_URL=server.url, SVIX_TOKEN=server.token,
               RECEIVER_URL=receiver.url("/from-js"), RUN_ID=uuid.uuid4().hex[:8])  # fmt: skip
    code, out, err = await _run(NODE, "flow.mjs", env=env, timeout=180)
    assert code == 0, f"node exited {code}:\n{err[-3000:]}"
    doc: dict[str, Any] = json.loads(out)

    failed = [s for s in doc["steps"] if not s["ok"]]
    assert not failed and "fatal" not in doc, json.dumps(
        {"failed": failed, "fatal": doc.get("fatal")}, indent=1
    )

    assert doc["appId"] and doc["appIdAgain"] == doc["appId"] == doc["appByUid"]
    assert doc["appName"] == "JS Co" and doc["appCreatedAt"]
    assert doc["eventTypeName"] == "js.order.paid"
    assert set(doc["endpointIds"]) == {doc["endpointId"], doc["endpoint2Id"]}

    # The message, as created and as it arrived at node's receiver.
    assert doc["msgId"] and doc["msgEventId"].startswith("js-evt-")
    assert doc["msgPayloadEqual"] and doc["msgTimestampValid"]
    assert doc["verified"] is True and doc["tamperedRejected"] is True and doc["bodyEqual"]

    attempt = doc["attempt"]
    assert attempt["msgId"] == doc["msgId"] and attempt["endpointId"] == doc["endpointId"]
    assert attempt["status"] == 0 and attempt["statusText"] == "success"
    assert attempt["triggerType"] == 0 and attempt["responseStatusCode"] == 200
    assert attempt["timestampValid"]
    assert attempt["id"] in doc["byEndpointIds"]
    assert doc["getPayloadEqual"] is True

    # Errors as the SDK parses them.
    assert doc["duplicate"]["status"] == 409
    assert isinstance(doc["duplicate"]["body"]["code"], str)
    assert isinstance(doc["duplicate"]["body"]["detail"], str)
    assert doc["invalid"]["status"] == 422
    detail = doc["invalid"]["body"]["detail"]
    assert isinstance(detail, list) and detail and {"loc", "msg", "type"} <= set(detail[0])
    assert doc["missing"]["status"] == 404 and isinstance(doc["missing"]["body"]["detail"], str)

    # Pages one at a time: three messages, each once; every page but the last has an iterator.
    pages = doc["pages"]
    assert len(pages["ids"]) == len(set(pages["ids"])) == 3 and doc["msgId"] in pages["ids"]
    assert all(p["hasIterator"] and not p["done"] for p in pages["shapes"][:-1])
    assert pages["shapes"][-1]["done"]

    assert doc["secretRotated"] is True

    # The same message reached this test's receiver, signed with the second
    # endpoint's secret (checked with the Python SDK this time).
    def arrived() -> list[Any]:
        return [r for r in receiver.requests_to("/from-js")
                if json.loads(r.body).get("marker") == "js-first"]  # fmt: skip

    for _ in range(600):
        if arrived():
            break
        await asyncio.sleep(0.05)
    (got,) = arrived()
    Webhook(doc["secret2"]).verify(got.body, got.headers)

    # The portal link signs in (once).
    portal = doc["portal"]
    assert portal["url"].startswith(server.url + "/") and portal["token"]
    async with aiohttp.ClientSession() as s:
        async with s.get(portal["url"], allow_redirects=False) as r:
            assert r.status == 303 and r.headers["Location"].endswith("/portal")
        async with s.get(portal["url"], allow_redirects=False) as r:
            assert r.status == 401
