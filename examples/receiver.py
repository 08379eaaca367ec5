"""A webhook receiver for dispatcher, built on dispatcher.receiver.

It verifies every POST (signature over the raw body, timestamp within five
minutes), applies each event once, and prints one line per event: its id and
type (the payload's `type` field, as Standard Webhooks payloads carry it),
never the payload (which may carry click ids or payment data).

    python examples/receiver.py --port 8081 --secret whsec_... [--database-url URL]

With --database-url the event id is claimed in PostgreSQL inside the same
transaction that would apply the event (`claim_once`), so replays are
ignored across restarts and across several receiver processes. Without it,
a small in-memory set does the same for this process only.

Next to `dispatcher demo` (it leaves its database behind and prints its
DATABASE_URL), or against any dispatcher database:

    export DATABASE_URL=...  DISPATCHER_ALLOW_PRIVATE_TARGETS=1  # 127.0.0.1 targets
    dispatcher endpoint add --url http://127.0.0.1:8081/orders --event-type shop.order --json
    python examples/receiver.py --port 8081 --secret <the "secret" printed above> \\
        --database-url "$DATABASE_URL"
    dispatcher enqueue --event-type shop.order --event-id evt_1 \\
        --payload '{"type": "shop.order", "amount": 3}'
    dispatcher run --drain

A second endpoint with the same URL and secret delivers the same event id
again: the receiver answers 200 and prints it as a duplicate. The secret can
also come from WEBHOOK_SECRET (a command line is visible to other users);
repeat --secret to accept an old and a new secret during a rotation.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import signal
import sys
from collections import OrderedDict
from collections.abc import Sequence

import asyncpg
import orjson
from aiohttp import web

from dispatcher.receiver import WEBHOOK_ID, claim_once, ensure_idempotency_table
from dispatcher.receiver import webhook_middleware as make_middleware

HOST = "127.0.0.1"  # a demo receiver has no business listening on other interfaces
POOL = web.AppKey("pool", asyncpg.Pool)
RECENT = web.AppKey("recent", OrderedDict)
RECENT_MAX = 10_000


def _printable(text: str, limit: int = 80) -> str:
    """Ids and types are the sender's text: keep terminal escapes out of the log."""
    clean = "".join(c if c.isprintable() else "?" for c in text[:limit])
    return clean + ("…" if len(text) > limit else "")


def _event_type(body: bytes) -> str:
    """The `type` field Standard Webhooks payloads carry, or what the body
    is instead: a bare `-` read as a type nobody had sent."""
    try:
        doc = orjson.loads(body)
    except orjson.JSONDecodeError:
        return "(body is not JSON)"
    kind = doc.get("type") if isinstance(doc, dict) else None
    return _printable(kind) if isinstance(kind, str) else '(no "type" field in the payload)'


async def handle(request: web.Request) -> web.StreamResponse:
    """Apply one verified event, once. A duplicate still gets 200: answering
    anything else would make dispatcher retry an event that is already done."""
    webhook_id = request[WEBHOOK_ID]  # set by the middleware after verifying
    body = await request.read()  # cached by aiohttp: the bytes that were verified
    pool = request.app.get(POOL)
    if pool is not None:
        async with pool.acquire() as conn, conn.transaction():
            first = await claim_once(conn, webhook_id)
            # ... apply the event here, on `conn`, so it commits with the claim.
    else:
        recent = request.app[RECENT]
        first = webhook_id not in recent
        recent[webhook_id] = True
        recent.move_to_end(webhook_id)
        while len(recent) > RECENT_MAX:
            recent.popitem(last=False)
    note = "" if first else "  (duplicate, ignored)"
    print(f"{_printable(webhook_id)}  {_event_type(body)}{note}", flush=True)
    return web.json_response({"received": True, "duplicate": not first})


def build_app(secrets: Sequence[str], pool: asyncpg.Pool | None) -> web.Application:
    """Every POST, whatever its path, must be signed: endpoint URLs can differ."""
    app = web.Application(middlewares=[make_middleware(secrets)])
    if pool is not None:
        app[POOL] = pool
    app[RECENT] = OrderedDict()
    app.router.add_post("/{tail:.*}", handle)
    return app


async def serve(port: int, secrets: Sequence[str], database_url: str | None) -> int:
    pool: asyncpg.Pool | None = None
    if database_url:
        try:
            pool = await asyncpg.create_pool(database_url, min_size=1, max_size=10)
            async with pool.acquire() as conn:
                await ensure_idempotency_table(conn)
        except (OSError, asyncpg.PostgresError, asyncpg.InterfaceError, ValueError) as exc:
            # Not the URL itself: it may carry a password.
            print(f"receiver: cannot use the database: {type(exc).__name__}: {exc}",
                  file=sys.stderr)  # fmt: skip
            if pool is not None:
                await pool.close()
            return 1
    runner = web.AppRunner(build_app(secrets, pool), access_log=None, handle_signals=False)
    await runner.setup()
    try:
        try:
            await web.TCPSite(runner, HOST, port).start()
        except OSError as exc:
            print(f"receiver: cannot listen on {HOST}:{port}: {exc.strerror}", file=sys.stderr)
            return 1
        bound = runner.addresses[0][1]
        where = "claims in PostgreSQL" if pool is not None else "in-memory dedup"
        print(f"listening on http://{HOST}:{bound}/ ({where}); Ctrl-C to stop", flush=True)
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)
        await stop.wait()
        return 0
    finally:
        await runner.cleanup()
        if pool is not None:
            await pool.close()


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description="Verify and print dispatcher webhooks (id and type, never the payload)."
    )
    parser.add_argument("--port", type=int, default=8081, help="port on 127.0.0.1 (8081)")
    parser.add_argument(
        "--secret",
        action="append",
        help="whsec_ secret of the endpoint; repeat during a rotation (env WEBHOOK_SECRET)",
    )
    parser.add_argument("--database-url", help="claim event ids in this PostgreSQL database")
    args = parser.parse_args(argv)
    if not 0 <= args.port <= 65535:
        parser.error("--port must be 0..65535")
    secrets = args.secret or [s for s in [os.environ.get("WEBHOOK_SECRET", "")] if s]
    if not secrets:
        parser.error("--secret (or WEBHOOK_SECRET) is required")
    try:
        make_middleware(secrets)  # refuse a bad secret now, not as 401s later
    except ValueError as exc:
        parser.error(str(exc))
    # Refused requests are logged by dispatcher.receiver, one line each.
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    return asyncio.run(serve(args.port, secrets, args.database_url))


if __name__ == "__main__":
    sys.exit(main())
