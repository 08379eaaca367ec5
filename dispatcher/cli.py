"""The command line: `dispatcher …` and `python -m dispatcher …`.

An entry point: it wires settings, the database and the engine together.
Every error reaches the user as one line on stderr (exit 2 for bad input,
1 for operational failure); `--json` prints exactly one document on stdout.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gc
import os
import signal
import sys
from collections.abc import Awaitable, Callable, Coroutine, Sequence
from datetime import datetime
from typing import Any, NoReturn

import asyncpg
import orjson

from . import __version__, reports, service, store
from .api import check_endpoint_id, check_event_type, payload_text
from .cli_format import print_table
from .embedded import resolve_database_url
from .errors import BadInput, DispatcherError, OperationalError
from .models import EndpointSpec
from .settings import Settings

Handler = Callable[[argparse.Namespace, Settings], Coroutine[Any, Any, int]]


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        # One line, not argparse's usage block.
        sys.stderr.write(f"dispatcher: error: {message}\n")
        sys.exit(2)


# ---------------------------------------------------------------- output


def _emit(args: argparse.Namespace, doc: Any, human: Callable[[], None]) -> None:
    if getattr(args, "json", False):
        sys.stdout.write(orjson.dumps(doc, default=_default).decode() + "\n")
    else:
        human()


def _default(value: Any) -> Any:
    from decimal import Decimal

    if isinstance(value, Decimal):
        return float(value)
    raise TypeError


# ---------------------------------------------------------------- database


async def _with_conn(settings: Settings, fn: Callable[[asyncpg.Connection], Awaitable[int]]) -> int:
    url = resolve_database_url(settings.database_url, settings.home)
    conn = await store.connect(url)
    try:
        await store.require_schema(conn)
        return await fn(conn)
    finally:
        await conn.close()


# ---------------------------------------------------------------- commands


async def cmd_migrate(args: argparse.Namespace, settings: Settings) -> int:
    url = resolve_database_url(settings.database_url, settings.home)
    conn = await store.connect(url)
    try:
        applied = await store.migrate(conn)
    finally:
        await conn.close()
    _emit(
        args,
        {"applied": applied, "current": True},
        lambda: print(f"applied {len(applied)} migration(s); schema is current"),
    )
    return 0


def _spec(args: argparse.Namespace) -> EndpointSpec:
    fields: dict[str, Any] = {
        name: getattr(args, name)
        for name in service.SPEC_FIELDS
        if name not in ("event_types", "headers") and getattr(args, name, None) is not None
    }
    if args.event_type:
        fields["event_types"] = args.event_type
    if args.header:
        fields["headers"] = args.header
    return service.spec_from_fields(fields)


async def cmd_endpoint_add(args: argparse.Namespace, settings: Settings) -> int:
    spec = _spec(args)

    async def go(conn: asyncpg.Connection) -> int:
        secret = spec.secret or service.new_secret(args.signature)
        row = await store.add_endpoint(conn, spec, secret, settings.secret_box())
        doc = store.endpoint_public(row, secret=secret)
        _emit(
            args, doc, lambda: print(f"endpoint {doc['id']} {doc['url']}\nsecret {doc['secret']}")
        )
        return 0

    return await _with_conn(settings, go)


async def cmd_endpoint_list(args: argparse.Namespace, settings: Settings) -> int:
    async def go(conn: asyncpg.Connection) -> int:
        rows = [store.endpoint_public(r) for r in await store.list_endpoints(conn)]
        cols = ["id", "url", "enabled", "event_types", "rate_per_s", "max_in_flight",
                "timeout_ms", "max_attempts"]  # fmt: skip
        _emit(args, rows, lambda: print_table(rows, cols))
        return 0

    return await _with_conn(settings, go)


async def cmd_endpoint_rotate(args: argparse.Namespace, settings: Settings) -> int:
    if args.grace_s < 0:
        raise BadInput("--grace-s must not be negative")

    async def go(conn: asyncpg.Connection) -> int:
        current = await store.get_endpoint(conn, args.id)
        secret = service.new_secret("v1a" if current["secret"].startswith("whsk_") else "v1")
        if settings.secret_key is None and current["secret"].startswith("enc:"):
            raise OperationalError("endpoint secrets are encrypted: set DISPATCHER_SECRET_KEY")
        row = await store.rotate_secret(conn, args.id, secret, args.grace_s, settings.secret_box())
        doc = store.endpoint_public(row, secret=secret)
        doc["grace_s"] = args.grace_s
        _emit(args, doc, lambda: print(f"endpoint {doc['id']} new secret {doc['secret']}"))
        return 0

    return await _with_conn(settings, go)


def _toggle(enabled: bool) -> Handler:
    async def handler(args: argparse.Namespace, settings: Settings) -> int:
        async def go(conn: asyncpg.Connection) -> int:
            row = await store.set_enabled(conn, args.id, enabled)
            doc = store.endpoint_public(row)
            state = "enabled" if enabled else "disabled"
            _emit(args, doc, lambda: print(f"endpoint {doc['id']} {state}"))
            return 0

        return await _with_conn(settings, go)

    return handler


async def cmd_endpoint_health(args: argparse.Namespace, settings: Settings) -> int:
    async def go(conn: asyncpg.Connection) -> int:
        rows = await store.endpoint_health(conn, settings.latency_window_s)
        cols = ["endpoint_id", "state", "consecutive_failures", "p50_ms", "p95_ms", "p99_ms",
                "sample_count", "enabled", "url"]  # fmt: skip
        _emit(args, rows, lambda: print_table(rows, cols))
        return 0

    return await _with_conn(settings, go)


async def cmd_enqueue(args: argparse.Namespace, settings: Settings) -> int:
    if args.file is not None:
        if args.payload is not None or args.event_type is not None:
            raise BadInput("--file cannot be combined with --event-type/--payload")
        events = service.read_events(args.file, settings.max_payload_bytes)

        async def bulk(conn: asyncpg.Connection) -> int:
            created = await store.enqueue_bulk(conn, events)
            doc = {"events": len(events), "deliveries": created}
            _emit(args, doc, lambda: print(f"{len(events)} events, {created} deliveries queued"))
            return 0

        return await _with_conn(settings, bulk)

    if args.event_type is None or args.payload is None:
        raise BadInput("enqueue needs --event-type and --payload (or --file)")
    event_type = check_event_type(args.event_type)
    event_id = service.event_id_of(args.event_id)
    endpoint = check_endpoint_id(args.endpoint)
    # --payload is JSON text: kept byte for byte, unlike a parsed document.
    payload = payload_text(args.payload, settings.max_payload_bytes)

    async def one(conn: asyncpg.Connection) -> int:
        ids = await store.enqueue(conn, event_type, payload, event_id, endpoint)
        doc = {"event_id": event_id, "deliveries": ids}
        _emit(args, doc, lambda: print(f"event {event_id}: deliveries {ids}"))
        return 0

    return await _with_conn(settings, one)


async def cmd_health(args: argparse.Namespace, settings: Settings) -> int:
    async def go(conn: asyncpg.Connection) -> int:
        doc = await store.health_summary(conn)
        _emit(args, doc, lambda: print_table([doc], list(doc)))
        return 0

    return await _with_conn(settings, go)


async def cmd_slow(args: argparse.Namespace, settings: Settings) -> int:
    async def go(conn: asyncpg.Connection) -> int:
        rows = [
            r
            for r in await store.endpoint_health(conn, settings.latency_window_s)
            if r["sample_count"] >= 20 and r["p95_ms"] is not None and r["p95_ms"] > args.p95_ms
        ]
        cols = ["endpoint_id", "url", "p50_ms", "p95_ms", "p99_ms", "sample_count", "state"]
        _emit(args, rows, lambda: print_table(rows, cols))
        return 0

    return await _with_conn(settings, go)


async def cmd_dlq_analyze(args: argparse.Namespace, settings: Settings) -> int:
    if args.hours <= 0:
        raise BadInput("--hours must be positive")

    async def go(conn: asyncpg.Connection) -> int:
        rows = await reports.dlq_report(conn, args.hours)
        cols = ["endpoint_id", "dead", "primary_status_code", "primary_error", "avg_attempts",
                "pattern", "suggested_action"]  # fmt: skip
        _emit(args, rows, lambda: print_table(rows, cols))
        return 0

    return await _with_conn(settings, go)


def _time(value: str | None, flag: str) -> datetime | None:
    if value is None:
        return None
    try:
        t = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        raise BadInput(f"{flag} must be an ISO-8601 time, got {value!r}") from None
    if t.tzinfo is None:
        from datetime import UTC

        t = t.replace(tzinfo=UTC)
    return t


async def cmd_dlq_replay(args: argparse.Namespace, settings: Settings) -> int:
    if not args.id and args.endpoint is None:
        raise BadInput("dlq replay needs --id ID … or --endpoint ID")
    if args.id and args.endpoint is not None:
        raise BadInput("use either --id or --endpoint, not both")
    if args.limit < 1:
        raise BadInput("--limit must be at least 1")
    since = _time(args.since, "--since")
    until = _time(args.until, "--until")

    async def go(conn: asyncpg.Connection) -> int:
        if args.id:
            n = await store.replay_ids(conn, list(args.id))
        else:
            n = await store.replay_endpoint(conn, args.endpoint, since, until, args.limit)
            if n == args.limit:
                sys.stderr.write(f"dispatcher: replayed the cap of {n}; run again for more\n")
        _emit(args, {"requeued": n}, lambda: print(f"requeued {n} dead letter(s)"))
        return 0

    return await _with_conn(settings, go)


async def cmd_alerts(args: argparse.Namespace, settings: Settings) -> int:
    async def go(conn: asyncpg.Connection) -> int:
        doc = await reports.alerts(conn, settings)
        rows = [{"alert": k, **v} for k, v in doc.items()]
        _emit(args, doc, lambda: print_table(rows, ["alert", "firing", "value", "threshold"]))
        return 0

    return await _with_conn(settings, go)


async def cmd_run(args: argparse.Namespace, settings: Settings) -> int:
    from dataclasses import replace

    from . import log
    from .engine import Engine

    if args.max_in_flight is not None:
        settings = replace(settings, max_in_flight=args.max_in_flight)
    if args.batch_size is not None:
        settings = replace(settings, batch_size=args.batch_size)
    if settings.max_in_flight < 1 or settings.batch_size < 1:
        raise BadInput("--max-in-flight and --batch-size must be at least 1")
    log.setup(os.environ.get("DISPATCHER_LOG_LEVEL", "info"), settings.sensitive_fields)
    from .metrics import Metrics

    url = resolve_database_url(settings.database_url, settings.home)
    metrics = Metrics()
    engine = Engine(settings, url, metrics=metrics)
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, engine.stop)
    # Long-lived start-up objects (modules, the loop) never become garbage;
    # freezing them and raising the young-generation threshold takes the
    # collector off the hot path (it cost ~20% of a busy process).
    _raise_file_limit()
    gc.collect()
    gc.freeze()
    gc.set_threshold(50_000, 50, 100)
    admin = None
    if args.http:
        from .admin import start_admin

        admin = await start_admin(args.http, settings, url, metrics)
    try:
        await engine.run(drain=args.drain)
    finally:
        if admin is not None:
            await admin.cleanup()
    return 0


def _raise_file_limit() -> None:
    """One socket per request in flight: lift the soft descriptor limit to the hard one."""
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY or soft < hard:
        with contextlib.suppress(ValueError, OSError):
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))


async def cmd_serve(args: argparse.Namespace, settings: Settings) -> int:
    from .admin import start_admin

    url = resolve_database_url(settings.database_url, settings.home)
    runner = await start_admin(args.http, settings, url)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    try:
        await stop.wait()
    finally:
        await runner.cleanup()
    return 0


async def cmd_demo(args: argparse.Namespace, settings: Settings) -> int:
    from .demo import run_demo

    code: int = await run_demo(
        settings,
        events=args.events,
        http=args.http,
        linger_s=args.linger_s,
        database=args.database,
    )
    return code


async def cmd_bench(args: argparse.Namespace, settings: Settings) -> int:
    import importlib
    from pathlib import Path

    # The harness lives in the checkout, not in the installed package.
    if (Path.cwd() / "benchmarks" / "harness.py").is_file() and str(Path.cwd()) not in sys.path:
        sys.path.insert(0, str(Path.cwd()))
    try:
        bench_main = importlib.import_module("benchmarks.harness").main
    except ImportError:
        raise OperationalError(
            "the benchmark harness lives in the repository's benchmarks/ folder: "
            "run `dispatcher bench` from a checkout"
        ) from None
    code: int = await bench_main(args.bench_args, settings)
    return code


# ---------------------------------------------------------------- parser


def build_parser() -> argparse.ArgumentParser:
    p = _Parser(prog="dispatcher", description="Webhook and postback delivery on PostgreSQL.")
    p.add_argument("--version", action="version", version=f"dispatcher {__version__}")
    sub = p.add_subparsers(dest="command", required=True, parser_class=_Parser)

    def cmd(name: str, handler: Handler, parent: Any = sub, **kw: Any) -> argparse.ArgumentParser:
        sp: argparse.ArgumentParser = parent.add_parser(name, **kw)
        sp.set_defaults(handler=handler)
        sp.add_argument("--json", action="store_true", help="print one JSON document")
        return sp

    cmd("migrate", cmd_migrate, help="apply schema migrations")

    ep = sub.add_parser("endpoint", help="manage endpoints")
    eps = ep.add_subparsers(dest="endpoint_command", required=True, parser_class=_Parser)
    add = cmd("add", cmd_endpoint_add, eps)
    add.add_argument("--url", required=True)
    add.add_argument("--secret")
    add.add_argument("--event-type", action="extend", nargs="+")
    add.add_argument("--rate-per-s", type=float)
    add.add_argument("--burst", type=int)
    add.add_argument("--max-in-flight", type=int, default=100)
    add.add_argument("--timeout-ms", type=int, default=15_000)
    add.add_argument("--max-attempts", type=int, default=5)
    add.add_argument("--retry-base-ms", type=int, default=30_000)
    add.add_argument("--retry-cap-ms", type=int, default=3_600_000)
    add.add_argument("--failure-threshold", type=int, default=10)
    add.add_argument("--cooldown-s", type=float, default=300.0)
    add.add_argument("--header", action="append", metavar="'NAME: VALUE'")
    add.add_argument(
        "--signature",
        choices=("v1", "v1a"),
        default="v1",
        help="v1: HMAC-SHA256 (whsec_); v1a: ed25519 (whsk_; receivers verify with whpk_)",
    )
    cmd("list", cmd_endpoint_list, eps)
    rot = cmd("rotate-secret", cmd_endpoint_rotate, eps)
    rot.add_argument("id", type=int)
    rot.add_argument("--grace-s", type=float, default=86_400.0)
    for name, enabled in (("disable", False), ("enable", True)):
        t = cmd(name, _toggle(enabled), eps)
        t.add_argument("id", type=int)
    cmd("health", cmd_endpoint_health, eps)

    enq = cmd("enqueue", cmd_enqueue, help="queue an event (or a JSONL file of them)")
    enq.add_argument("--event-type")
    enq.add_argument("--payload")
    enq.add_argument("--event-id")
    enq.add_argument("--endpoint", type=int)
    enq.add_argument("--file")

    run = cmd("run", cmd_run, help="the worker")
    run.add_argument("--drain", action="store_true")
    run.add_argument("--max-in-flight", type=int)
    run.add_argument("--batch-size", type=int)
    run.add_argument("--http", metavar="HOST:PORT")

    serve = cmd("serve", cmd_serve, help="the admin API alone")
    serve.add_argument("--http", metavar="HOST:PORT", required=True)

    cmd("alerts", cmd_alerts)
    cmd("health", cmd_health)
    slow = cmd("slow", cmd_slow)
    slow.add_argument("--p95-ms", type=float, default=2000.0)

    dlq = sub.add_parser("dlq", help="dead letters")
    dlqs = dlq.add_subparsers(dest="dlq_command", required=True, parser_class=_Parser)
    an = cmd("analyze", cmd_dlq_analyze, dlqs)
    an.add_argument("--hours", type=float, default=24.0)
    rp = cmd("replay", cmd_dlq_replay, dlqs)
    rp.add_argument("--id", type=int, action="extend", nargs="+")
    rp.add_argument("--endpoint", type=int)
    rp.add_argument("--since")
    rp.add_argument("--until")
    rp.add_argument("--limit", type=int, default=10_000, help="at most this many per call")

    demo = cmd("demo", cmd_demo, help="see it work on local receivers")
    demo.add_argument("--events", type=int, default=300)
    demo.add_argument("--database", default="dispatcher_demo",
                      help="the database the demo (re)creates on the server")  # fmt: skip
    demo.add_argument(
        "--http",
        default="127.0.0.1:0",
        metavar="HOST:PORT",
        help="where the dashboard is served during the demo",
    )
    demo.add_argument("--linger-s", type=float, default=0.0,
                      help="keep the dashboard up this long after the story")  # fmt: skip

    bench = cmd("bench", cmd_bench, help="the benchmark harness", add_help=False)
    bench.add_argument("bench_args", nargs=argparse.REMAINDER)
    return p


def main(argv: Sequence[str] | None = None) -> None:
    parser = build_parser()
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["bench"]:
        # Everything after `bench` belongs to the harness, flags included.
        args = argparse.Namespace(handler=cmd_bench, bench_args=argv[1:])
    else:
        args = parser.parse_args(argv)
    try:
        settings = Settings.from_env()
        code = _run(args.handler(args, settings))
    except DispatcherError as exc:
        sys.stderr.write(f"dispatcher: error: {exc}\n")
        code = exc.exit_code
    except (OSError, asyncpg.PostgresError, TimeoutError) as exc:
        msg = str(exc).strip().splitlines()
        sys.stderr.write(f"dispatcher: error: {msg[0] if msg else type(exc).__name__}\n")
        code = 1
    except KeyboardInterrupt:
        code = 130
    except Exception as exc:  # a bug: still one line, never a traceback
        if os.environ.get("DISPATCHER_DEBUG") == "1":
            raise
        msg = str(exc).strip().splitlines()
        detail = msg[0] if msg else ""
        sys.stderr.write(f"dispatcher: internal error: {type(exc).__name__}: {detail}\n")
        code = 1
    sys.exit(code)


def _run(coro: Coroutine[Any, Any, int]) -> int:
    import uvloop

    result: int = uvloop.run(coro)
    return result
