"""The `jobqueue` scenario's other side: the same webhooks sent by a
procrastinate worker, in a process of its own.

    python -m benchmarks.jobqueue_worker schema --db URL
    python -m benchmarks.jobqueue_worker defer --db URL --events N
    python -m benchmarks.jobqueue_worker work --db URL --url URL --secret S --concurrency C

`schema` applies procrastinate's schema to an empty database; `defer` defers
N jobs with its bulk API (one `batch_defer_async` call), each carrying an
event id and a postback payload; `work` runs a worker until the queue is empty.
Its task is what the dispatcher does per delivery: a Standard Webhooks signed
POST through one shared aiohttp session, raising on anything but a 2xx so
that procrastinate's retry applies. Each prints one JSON document.

Written as a procrastinate user would write it (procrastinate's defaults for
the connection pool, logging and garbage collector); imports nothing of the
harness but the payloads and the raw client's signer, so that it measures
only itself.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import time
from typing import Any

import aiohttp
import procrastinate
import uvloop

from dispatcher import __version__

from .payloads import postback_payload
from .rawclient import _signer

TASK = "deliver_webhook"
RETRIES = 3


class NotDelivered(Exception):
    """A non-2xx answer: procrastinate retries the job."""


class Sender:
    """What every job shares: one session, one signer, one target."""

    def __init__(self, url: str, secret: str) -> None:
        self.url = url
        self.sign = _signer(secret)
        self.user_agent = f"dispatcher/{__version__}"
        self.timeout = aiohttp.ClientTimeout(total=15)
        self.session: aiohttp.ClientSession | None = None
        self.ok = 0
        self.failed = 0

    async def deliver(self, event_id: str, payload: dict[str, Any]) -> None:
        """The task: one signed POST of the payload."""
        assert self.session is not None
        body = json.dumps(payload, separators=(",", ":")).encode()
        ts = int(time.time())
        headers = {
            "content-type": "application/json",
            "user-agent": self.user_agent,
            "webhook-id": event_id,
            "webhook-timestamp": str(ts),
            "webhook-signature": self.sign(event_id, ts, body),
        }
        async with self.session.post(
            self.url, data=body, headers=headers, allow_redirects=False, timeout=self.timeout
        ) as resp:
            await resp.read()
            if not 200 <= resp.status < 300:
                self.failed += 1
                raise NotDelivered(f"HTTP {resp.status}")
        self.ok += 1


def make_app(db_url: str) -> procrastinate.App:
    return procrastinate.App(connector=procrastinate.PsycopgConnector(conninfo=db_url))


async def schema(db_url: str) -> dict[str, Any]:
    async with make_app(db_url).open_async() as app:
        await app.schema_manager.apply_schema_async()
    return {"schema": "applied"}


async def defer(db_url: str, events: int, prefix: str) -> dict[str, Any]:
    """N jobs in one bulk call; the call's own time besides the process's."""
    rng = random.Random(7)
    jobs: list[dict[str, Any]] = [
        {"event_id": f"{prefix}{i}", "payload": postback_payload(rng, i)} for i in range(events)
    ]
    async with make_app(db_url).open_async() as app:
        t0 = time.perf_counter()
        ids = await app.configure_task(TASK).batch_defer_async(*jobs)
        elapsed = time.perf_counter() - t0
    return {"events": len(ids), "call_s": round(elapsed, 3)}


async def work(db_url: str, url: str, secret: str, concurrency: int) -> dict[str, Any]:
    """One worker until the queue is empty (wait=False), then its counts."""
    sender = Sender(url, secret)
    app = make_app(db_url)
    app.task(name=TASK, retry=RETRIES)(sender.deliver)
    connector = aiohttp.TCPConnector(limit=0, limit_per_host=0, keepalive_timeout=30)
    t0 = time.perf_counter()
    async with (
        aiohttp.ClientSession(
            connector=connector,
            auto_decompress=False,
            skip_auto_headers=("Accept-Encoding",),
            cookie_jar=aiohttp.DummyCookieJar(),
        ) as session,
        app.open_async(),
    ):
        sender.session = session
        await app.run_worker_async(concurrency=concurrency, wait=False)
    elapsed = time.perf_counter() - t0
    return {"ok": sender.ok, "failed_attempts": sender.failed, "seconds": round(elapsed, 3)}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.jobqueue_worker")
    sub = p.add_subparsers(dest="command", required=True)
    d = sub.add_parser("defer", help="apply the schema and defer N jobs")
    d.add_argument("--db", required=True)
    d.add_argument("--events", type=int, required=True)
    d.add_argument("--id-prefix", default="pq_")
    w = sub.add_parser("work", help="run a worker until the queue is empty")
    w.add_argument("--db", required=True)
    w.add_argument("--url", required=True)
    w.add_argument("--secret", required=True)
    w.add_argument("--concurrency", type=int, required=True)
    s = sub.add_parser("schema", help="apply procrastinate's schema")
    s.add_argument("--db", required=True)
    a = p.parse_args(argv)
    if a.command == "schema":
        doc = uvloop.run(schema(a.db))
    elif a.command == "defer":
        doc = uvloop.run(defer(a.db, a.events, a.id_prefix))
    else:
        doc = uvloop.run(work(a.db, a.url, a.secret, a.concurrency))
    sys.stdout.write(json.dumps(doc) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
