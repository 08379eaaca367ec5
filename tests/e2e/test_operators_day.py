"""docs/operations/operators-day.md, run as written: its `sh` blocks, in
order, as one bash script, against a live `dispatcher run --http` whose
customer `acme` has an endpoint that moved (every attempt answers 404).
The walk must find it, fix its URL in place and replay what failed."""

from __future__ import annotations

import asyncio
import os
import re
import signal
from pathlib import Path

import asyncpg

from dispatcher import enqueue
from tests.conftest import REPO
from tests.e2e import test_dashboard as dashboard
from tests.e2e.test_portal import _admin
from tests.receivers import Receiver, status

console = dashboard.console
PAGE = REPO / "docs" / "operations" / "operators-day.md"


def _blocks() -> list[str]:
    return re.findall(r"^```sh\n(.*?)^```", PAGE.read_text(), flags=re.MULTILINE | re.DOTALL)


def test_the_page_has_the_walk() -> None:
    script = "\n".join(_blocks())
    for step in ("/v1/dead-letters/analyze", "/v1/deliveries?", "/v1/deliveries/$ONE",
                 "-X PATCH", "/v1/dead-letters/replay"):  # fmt: skip
        assert step in script, step
    assert "operators-day.md" in (REPO / "docs" / "operations" / "README.md").read_text()


async def test_the_walk_runs_as_written(
    conn: asyncpg.Connection, receiver: Receiver, console: str, tmp_path: Path
) -> None:
    receiver.routes["/acme/old"] = status(404)
    await _admin(console, "POST", "/v1/applications", {"id": "acme", "name": "Acme"})
    ep = await _admin(
        console,
        "POST",
        "/v1/endpoints",
        {"app": "acme", "url": receiver.url("/acme/old"), "name": "Acme orders"},
    )
    for i in range(4):
        await enqueue(conn, "order.paid", {"order": i}, f"acme-{i}", app="acme")
    await dashboard._until(
        conn, "SELECT count(*) = 4 FROM webhook_queue WHERE status = 'dead_letter'"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("DISPATCHER_")}
    env |= {"ADMIN": console, "DISPATCHER_ADMIN_TOKEN": dashboard.TOKEN,
            "NEW_URL": receiver.url("/acme/v2")}  # fmt: skip
    proc = await asyncio.create_subprocess_exec(
        "bash", "-c", "set -euo pipefail\n" + "\n".join(_blocks()), cwd=tmp_path, env=env,
        start_new_session=True, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    try:
        out_b, err_b = await asyncio.wait_for(proc.communicate(), 60)
    finally:
        if proc.returncode is None:
            os.killpg(proc.pid, signal.SIGKILL)
            await proc.wait()
    out, err = out_b.decode(), err_b.decode()
    assert proc.returncode == 0, f"stdout:\n{out[-3000:]}\nstderr:\n{err[-3000:]}"
    assert "4 dead, HTTP 404" in out and "0.0 of 4 attempts succeeded" in out, out
    assert "{'order': " in out and "HTTP 404" in out, out  # a payload and its attempts
    assert out.rstrip().endswith("4 delivered"), out
    row = await conn.fetchrow("SELECT id, url FROM endpoints WHERE id = $1", ep["id"])
    assert row["url"] == receiver.url("/acme/v2")
    assert len(receiver.requests_to("/acme/v2")) == 4
    assert list(tmp_path.iterdir()) == []  # the walk cleans up after itself
