"""`dispatcher demo`: the whole story on local receivers, in about fifteen seconds.

Five receivers on 127.0.0.1 (healthy, slow, flaky, broken-then-recovering,
and one that rejects our credentials), a few hundred events, and the engine
in this process: retries, a breaker opening, probing and closing, dead
letters and their analysis, percentiles. It uses its own database
(`dispatcher_demo`, recreated each run) on the configured server, and
refuses to start while another demo runs on that database.
"""

from __future__ import annotations

import asyncio
import random
import re
import secrets
import shlex
import shutil
import signal
import sys
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import asyncpg
import orjson
from aiohttp import web

from dispatcher import db
from dispatcher.cli import views
from dispatcher.cli.format import print_table
from dispatcher.core.errors import BadInput, OperationalError
from dispatcher.core.models import EndpointSpec
from dispatcher.db import catalog
from dispatcher.db.embedded import resolve_database_url
from dispatcher.metrics import Metrics
from dispatcher.ops import reports, service, tenancy
from dispatcher.settings import Settings
from dispatcher.web.admin import start_admin
from dispatcher.worker.engine import Engine

DEMO_DB = "dispatcher_demo"
DEMO_APP = "acme"
DEADLINE_S = 45.0
STATUSES = ("pending", "in_flight", "failed", "delivered", "dead_letter")


class DemoReceivers:
    def __init__(self) -> None:
        self.started = time.monotonic()
        self.runner: web.AppRunner | None = None
        self.port = 0
        self.counts: dict[str, int] = {}

    async def _handle(self, request: web.Request) -> web.Response:
        await request.read()
        name = request.match_info["name"]
        self.counts[name] = self.counts.get(name, 0) + 1
        if name == "slow":
            await asyncio.sleep(random.uniform(0.15, 0.45))
        elif name == "flaky" and random.random() < 0.35:
            return web.Response(status=503)
        elif name == "broken" and time.monotonic() - self.started < 6.0:
            return web.Response(status=500)  # down for the first six seconds
        elif name == "auth":
            return web.Response(status=401)
        return web.Response(status=200)

    async def start(self) -> None:
        app = web.Application()
        app.router.add_post("/{name}", self._handle)
        self.runner = web.AppRunner(app, handle_signals=False, access_log=None)
        await self.runner.setup()
        site = web.TCPSite(self.runner, "127.0.0.1", 0)
        await site.start()
        server: Any = site._server
        self.port = server.sockets[0].getsockname()[1]

    async def stop(self) -> None:
        if self.runner is not None:
            await self.runner.cleanup()


async def _setup(conn: asyncpg.Connection, port: int, events: int) -> dict[int, str]:
    base: dict[str, Any] = {
        "retry_base_ms": 300,
        "retry_cap_ms": 2000,
        "max_attempts": 4,
        "timeout_ms": 2000,
    }
    plan: dict[str, dict[str, Any]] = {
        "healthy": {"event_types": ("demo.conversion",)},
        "slow": {"event_types": ("demo.conversion",)},
        "flaky": {"event_types": ("demo.conversion",), "failure_threshold": 25},
        "broken": {"event_types": ("demo.conversion",), "failure_threshold": 5, "cooldown_s": 2.0},
        "auth": {"event_types": ("demo.refund",), "failure_threshold": 100},
    }
    names = {}
    for name, extra in plan.items():
        spec = EndpointSpec(url=f"http://127.0.0.1:{port}/{name}", name=name, **{**base, **extra})
        doc = await service.add_endpoint(conn, spec)
        names[doc["id"]] = name
    batch: list[catalog.StagedEvent] = [
        (
            f"evt_demo_{i}",
            "demo.conversion",
            orjson.dumps({"click_id": f"c{i}", "payout": 1.5}).decode(),
            None,
        )
        for i in range(events)
    ]
    batch += [
        (f"evt_refund_{i}", "demo.refund", orjson.dumps({"amount": 3}).decode(), None)
        for i in range(max(events // 15, 5))
    ]
    # A customer of the team running the demo, with its own endpoint: what
    # its portal shows is this application's, and nothing of the rest.
    await tenancy.add_application(conn, DEMO_APP, "Acme Inc (a customer)")
    spec = EndpointSpec(url=f"http://127.0.0.1:{port}/customer", name="acme-orders", **base)
    doc = await service.add_endpoint(conn, spec, app=DEMO_APP)
    names[doc["id"]] = "acme-orders"
    batch += [
        (f"evt_acme_{i}", "order.paid", orjson.dumps({"order": i}).decode(), None, DEMO_APP)
        for i in range(20)
    ]
    created = await catalog.enqueue_bulk(conn, batch)
    print(f"queued {len(batch)} events as {created} deliveries to {len(names)} endpoints")
    return names


def _invocation() -> str:
    """How this shell can call dispatcher again: bare when it is on PATH,
    otherwise the path this process was started by (a fresh `make demo`
    runs .venv/bin/dispatcher, which is not on PATH)."""
    me = sys.argv[0]
    if Path(me).name != "dispatcher":
        return f"{shlex.quote(sys.executable)} -m dispatcher"
    on_path = shutil.which("dispatcher")
    if on_path is not None and Path(on_path).resolve() == Path(me).resolve():
        return "dispatcher"
    return shlex.quote(me)


async def _until_interrupted() -> None:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    try:
        await stop.wait()
    finally:
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.remove_signal_handler(sig)


async def run_demo(
    settings: Settings,
    *,
    events: int = 300,
    http: str = "127.0.0.1:0",
    linger_s: float = 0.0,
    keep: bool = False,
    database: str = DEMO_DB,
) -> int:
    if not re.fullmatch(r"[a-z_][a-z0-9_]{0,62}", database):
        raise BadInput("--database must be a plain lower-case identifier")
    server_url = resolve_database_url(settings.database_url, settings.home)
    # Held for the whole run: a second demo on the same database would drop
    # it under this one (its dashboard showing the other run's data).
    guard = await db.connect(server_url)
    try:
        return await _run_demo(guard, server_url, settings, events=events, http=http,
                               linger_s=linger_s, keep=keep, database=database)  # fmt: skip
    finally:
        await guard.close()


async def _run_demo(
    guard: asyncpg.Connection,
    server_url: str,
    settings: Settings,
    *,
    events: int,
    http: str,
    linger_s: float,
    keep: bool,
    database: str,
) -> int:
    if not await guard.fetchval("SELECT pg_try_advisory_lock(hashtext($1))", f"demo:{database}"):
        raise OperationalError(
            f"another dispatcher demo is running on database {database}: stop it first, "
            f"or run this one beside it with --database {database}_2"
        )
    url = await db.recreate_database(server_url, database)
    receivers = DemoReceivers()
    await receivers.start()
    token = settings.admin_token or secrets.token_urlsafe(24)
    # One Metrics for the engine and the dashboard's /metrics, which
    # otherwise counts the deliveries of an engine that is not there.
    metrics = Metrics()
    admin = await start_admin(http, replace(settings, admin_token=token), url, metrics,
                              quiet=True)  # fmt: skip
    host, port = admin.addresses[0][:2]
    dashboard = f"http://{host}:{port}/"
    until = "until you press Ctrl-C" if keep else "while the demo runs (--keep leaves it up)"
    print(f"dashboard: {dashboard} {until}; sign in with the admin token {token}")
    demo_settings = replace(
        settings,
        allow_private_targets=True,  # the demo's receivers are on 127.0.0.1
        poll_interval_s=0.2,
        endpoint_refresh_s=0.25,
        percentile_refresh_s=1.0,
        lease_margin_s=5.0,
        max_in_flight=200,
    )
    engine = Engine(demo_settings, url, metrics=metrics)
    conn = await db.connect(url)
    me = _invocation()
    try:
        names = await _setup(conn, receivers.port, events)
        task = asyncio.create_task(engine.run(), name="demo-engine")
        t0 = time.monotonic()
        shown = 0
        while time.monotonic() - t0 < DEADLINE_S:
            await asyncio.sleep(1.0)
            snap = await catalog.status_counts(conn)
            transitions = await catalog.breaker_transitions(conn, shown)
            for t in transitions:
                print(f"  breaker {names[t['endpoint_id']]}: {t['from_state']} -> {t['to_state']}")
            shown += len(transitions)
            print(
                f"t={time.monotonic() - t0:4.1f}s  "
                + "  ".join(f"{k}={snap.get(k, 0)}" for k in STATUSES)
            )
            if not any(snap.get(k) for k in ("pending", "in_flight", "failed")):
                break
        if not keep:
            engine.stop()
            await task
        await _report(conn, names, settings, me)
        print(f"\nthe commands above act on the demo's data with\n"
              f"  export DATABASE_URL={shlex.quote(url)}")  # fmt: skip
        if keep:
            # The worker keeps running: a replay from the dashboard or the
            # CLI is delivered to the demo's receivers while you watch.
            print(f"\nstill up: the worker, the receivers and the dashboard at {dashboard} "
                  f"(admin token {token}); Ctrl-C stops them")  # fmt: skip
            link = await tenancy.portal_link(conn, DEMO_APP, dashboard)
            print(f"a customer's own view (application {DEMO_APP}'s portal; the link works "
                  f"once, for an hour):\n  {link['url']}")  # fmt: skip
            await _until_interrupted()
            engine.stop()
            await task
        elif linger_s > 0:
            print(f"\nthe dashboard stays up for {linger_s:.0f} s: {dashboard}")
            await asyncio.sleep(linger_s)
    finally:
        await conn.close()
        await receivers.stop()
        await admin.cleanup()
    if not keep:
        print(f"\nthe dashboard has stopped with the demo. Look again with\n"
              f"  {me} demo --keep      (runs the story again and stays up)\n"
              f"or serve the data this run left in database {database!r}:\n"
              f"  DATABASE_URL={shlex.quote(url)} DISPATCHER_ADMIN_TOKEN={token} "
              f"{me} serve --http 127.0.0.1:8080\n"
              f"  then open http://127.0.0.1:8080/ and sign in with {token}")  # fmt: skip
    return 0


async def _report(
    conn: asyncpg.Connection, names: dict[int, str], settings: Settings, me: str
) -> None:
    print("\n== pipeline health (dispatcher health)")
    summary = await reports.health_summary(conn)
    print_table([summary], list(summary))
    print("\n== endpoints (dispatcher endpoint health)")
    rows = await reports.endpoint_health(conn, settings.latency_window_s)
    for r in rows:
        r["name"] = names[r["endpoint_id"]]
    print_table(rows, ["endpoint_id", "name", "state", "consecutive_failures", "p50_ms",
                       "p95_ms", "p99_ms", "sample_count"])  # fmt: skip
    print("\n== breaker transitions")
    for t in await catalog.breaker_transitions(conn):
        print(f"  {names[t['endpoint_id']]:8} {t['from_state']} -> {t['to_state']}"
              f" (cooldown {t['cooldown_seconds']:.0f}s)")  # fmt: skip
    print("\n== dead letters (dispatcher dlq analyze)")
    out = await reports.dlq_analyze(conn)
    for r in out:
        r["endpoint"] = names[r["endpoint_id"]]
        # Suggested commands run as printed in this shell.
        r["suggested_action"] = r["suggested_action"].replace("`dispatcher ", f"`{me} ")
    views.dlq_analyze(out, ["endpoint", "dead", "primary_status_code", "avg_attempts", "pattern"])
