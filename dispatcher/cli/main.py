"""The command line: `dispatcher …` and `python -m dispatcher …`.

An entry point: it wires settings, the database and the engine together.
Every error reaches the user as one line on stderr (exit 2 for bad input,
1 for operational failure); `--json` prints exactly one document on stdout.
"""

from __future__ import annotations

import argparse
import copy
import os
import sys
from collections.abc import Coroutine, Sequence
from typing import Any, NoReturn

import asyncpg

from dispatcher import db
from dispatcher.cli import views
from dispatcher.cli.apps import add_app_commands
from dispatcher.cli.common import Handler, emit, report, table, with_conn
from dispatcher.cli.dbcommands import cmd_db_status, cmd_db_stop, cmd_db_url
from dispatcher.cli.eventtypes import add_event_type_commands
from dispatcher.cli.format import print_table
from dispatcher.cli.help import ENDPOINT_FLAGS, OVERVIEW, SHAPING_FLAGS
from dispatcher.cli.opswebhooks import add_ops_webhook_commands
from dispatcher.cli.postbacks import add_endpoint_flags, add_enqueue_flags, add_postback_commands
from dispatcher.cli.postbacks import schedule as enqueue_schedule
from dispatcher.cli.run import cmd_bench, cmd_demo, cmd_run, cmd_serve
from dispatcher.cli.wake import add_wake_command
from dispatcher.core.errors import BadInput, DispatcherError
from dispatcher.core.models import EndpointSpec
from dispatcher.db.embedded import resolve_database_url
from dispatcher.ops import reports, service
from dispatcher.ops.inputs import SPEC_FIELDS, read_payload, read_text_file, spec_from_fields
from dispatcher.settings import Settings
from dispatcher.version import __version__


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        if message.endswith("required: COMMAND"):
            # `dispatcher` (or `dispatcher endpoint`) alone: someone looking
            # around, who needs the commands more than the complaint.
            sys.stderr.write(self.format_help())
            sys.exit(2)
        # One line, not argparse's usage block.
        sys.stderr.write(f"dispatcher: error: {message}\n")
        sys.exit(2)


# ---------------------------------------------------------------- commands


async def cmd_migrate(args: argparse.Namespace, settings: Settings) -> int:
    url = resolve_database_url(settings.database_url, settings.home)
    conn = await db.connect(url)
    try:
        applied = await db.migrate(conn)
    finally:
        await conn.close()
    emit(
        args,
        {"applied": applied, "current": True},
        lambda: print(f"applied {len(applied)} migration(s); schema is current"),
    )
    return 0


def _fields(args: argparse.Namespace) -> dict[str, Any]:
    """The endpoint fields the flags name: all of them for add, the ones to
    change for update (a flag not given is None and names nothing)."""
    fields: dict[str, Any] = {
        name: getattr(args, name)
        for name in SPEC_FIELDS
        if name not in ("event_types", "headers") and getattr(args, name, None) is not None
    }
    if args.event_type:
        fields["event_types"] = args.event_type
    if args.header:
        fields["headers"] = args.header
    for name in ("client_cert", "client_key"):  # files on the command line, PEM text stored
        if name in fields:
            fields[name] = read_text_file(fields[name], f"--{name.replace('_', '-')}")
    return fields


def _spec(args: argparse.Namespace) -> EndpointSpec:
    return spec_from_fields(_fields(args))


async def cmd_endpoint_add(args: argparse.Namespace, settings: Settings) -> int:
    spec = _spec(args)
    box = settings.secret_box()
    return await report(
        args,
        settings,
        lambda conn: service.add_endpoint(
            conn,
            spec,
            signature=args.signature,
            box=box,
            targets=settings.target_policy(),
            app=args.app,
        ),
        lambda doc: print(f"endpoint {doc['id']} {doc['url']}\nsecret {doc['secret']}"),
    )


async def cmd_endpoint_update(args: argparse.Namespace, settings: Settings) -> int:
    # The PATCH operation: the flags given replace, the others stay.
    patch = _fields(args)
    if not patch:
        raise BadInput("endpoint update needs a flag to change (see `endpoint update --help`)")
    box = settings.secret_box()
    return await report(
        args,
        settings,
        lambda conn: service.update_endpoint(
            conn, args.id, patch, box=box, targets=settings.target_policy()
        ),
        lambda doc: print(f"endpoint {doc['id']} updated: {', '.join(sorted(patch))}"),
    )


# endpoint add's flags that set nothing an update may change: the secret's
# scheme comes with a new secret (rotate-secret), and an endpoint stays in
# its application.
_NOT_UPDATED = frozenset({"help", "json", "signature", "app"})


def _update_flags(add: argparse.ArgumentParser, update: argparse.ArgumentParser) -> None:
    """Every flag of `endpoint add` that sets a field, optional on `update`.
    Read from add's parser rather than listed again, so that a flag added
    to add is one update takes too."""
    for action in add._actions:
        if action.option_strings and action.dest not in _NOT_UPDATED:
            flag = copy.copy(action)
            flag.required = False
            update._add_action(flag)


async def cmd_endpoint_list(args: argparse.Namespace, settings: Settings) -> int:
    return await report(
        args, settings, lambda conn: service.list_endpoints(conn, args.app), views.endpoint_list
    )


async def cmd_endpoint_rotate(args: argparse.Namespace, settings: Settings) -> int:
    box = settings.secret_box()
    return await report(
        args,
        settings,
        lambda conn: service.rotate_secret(conn, args.id, args.grace_s, box),
        lambda doc: print(f"endpoint {doc['id']} new secret {doc['secret']}"),
    )


def _toggle(enabled: bool) -> Handler:
    state = "enabled" if enabled else "disabled"

    async def handler(args: argparse.Namespace, settings: Settings) -> int:
        return await report(
            args,
            settings,
            lambda conn: service.set_enabled(conn, args.id, enabled),
            lambda doc: print(f"endpoint {doc['id']} {state}"),
        )

    return handler


async def cmd_endpoint_delete(args: argparse.Namespace, settings: Settings) -> int:
    def human(doc: dict[str, Any]) -> None:
        dead = f" ({doc['dead_lettered']} queued deliveries dead-lettered)" if args.force else ""
        print(f"endpoint {doc['id']} deleted{dead}")

    return await report(
        args, settings, lambda conn: service.delete_endpoint(conn, args.id, args.force), human
    )


HEALTH_COLUMNS = ["endpoint_id", "app", "name", "state", "consecutive_failures", "p50_ms", "p95_ms",
                  "p99_ms", "sample_count", "enabled", "url"]  # fmt: skip


async def cmd_endpoint_health(args: argparse.Namespace, settings: Settings) -> int:
    return await report(
        args,
        settings,
        lambda conn: reports.endpoint_health(conn, settings.latency_window_s),
        table(HEALTH_COLUMNS),
    )


async def cmd_enqueue(args: argparse.Namespace, settings: Settings) -> int:
    limit = settings.max_payload_bytes
    when = enqueue_schedule(args)
    if args.file is not None:
        if args.payload is not None or args.event_type is not None:
            raise BadInput("--file cannot be combined with --event-type/--payload")
        return await report(
            args,
            settings,
            lambda conn: service.enqueue_file(conn, args.file, limit, args.app),
            lambda doc: print(f"{doc['events']} events, {doc['deliveries']} deliveries queued"),
        )
    if args.event_type is None or args.payload is None:
        raise BadInput("enqueue needs --event-type and --payload (or --file)")
    # --payload is JSON text (or @FILE, or - for stdin): kept byte for byte,
    # unlike a parsed document.
    payload = read_payload(args.payload)
    return await report(
        args,
        settings,
        lambda conn: service.enqueue(
            conn,
            args.event_type,
            payload,
            args.event_id,
            args.endpoint,
            max_payload_bytes=limit,
            app=args.app,
            **when,
        ),
        lambda doc: print(f"event {doc['event_id']}: deliveries {doc['deliveries']}"),
        note=lambda doc: None if doc["deliveries"] else _nobody_takes(args),
    )


def _nobody_takes(args: argparse.Namespace) -> None:
    """An event nobody takes is not an error (a producer may run ahead of
    its subscribers), but a person typing it wants to know."""
    who = (f"endpoint {args.endpoint} does not take" if args.endpoint is not None
           else f"no enabled endpoint of application {args.app or 'default'} takes")  # fmt: skip
    sys.stderr.write(
        f"dispatcher: nothing queued: {who} event type {args.event_type} "
        "(not subscribed, or a filter did not match)\n"
    )


async def cmd_health(args: argparse.Namespace, settings: Settings) -> int:
    return await report(
        args, settings, reports.health_summary, lambda doc: print_table([doc], list(doc))
    )


SLOW_COLUMNS = ["endpoint_id", "name", "url", "p50_ms", "p95_ms", "p99_ms", "sample_count", "state"]


async def cmd_slow(args: argparse.Namespace, settings: Settings) -> int:
    return await report(
        args,
        settings,
        lambda conn: reports.slow_endpoints(conn, settings.latency_window_s, args.p95_ms),
        table(SLOW_COLUMNS),
    )


async def cmd_dlq_analyze(args: argparse.Namespace, settings: Settings) -> int:
    return await report(
        args, settings, lambda conn: reports.dlq_analyze(conn, args.hours), views.dlq_analyze
    )


async def cmd_dlq_replay(args: argparse.Namespace, settings: Settings) -> int:
    if not args.id and args.endpoint is None:
        raise BadInput("dlq replay needs --id ID … or --endpoint ID")
    if args.id and args.endpoint is not None:
        raise BadInput("use either --id or --endpoint, not both")

    async def go(conn: asyncpg.Connection) -> int:
        done = await service.replay(
            conn,
            ids=args.id or None,
            endpoint_id=args.endpoint,
            since=args.since,
            until=args.until,
            limit=args.limit,
        )
        n = done.requeued
        if done.limit_reached:
            sys.stderr.write(f"dispatcher: replayed the cap of {n}; run again for more\n")
        emit(args, {"requeued": n}, lambda: print(f"requeued {n} dead letter(s)"))
        return 0

    return await with_conn(settings, go)


async def cmd_alerts(args: argparse.Namespace, settings: Settings) -> int:
    return await report(
        args, settings, lambda conn: reports.alerts(conn, settings.latency_window_s), views.alerts
    )


# ---------------------------------------------------------------- parser


def build_parser() -> argparse.ArgumentParser:
    p = _Parser(
        prog="dispatcher",
        description="Webhook and postback delivery on PostgreSQL.",
        epilog=OVERVIEW,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--version", action="version", version=f"dispatcher {__version__}")
    sub = p.add_subparsers(dest="command", required=True, parser_class=_Parser,
                           title="commands", metavar="COMMAND")  # fmt: skip

    def cmd(name: str, handler: Handler, parent: Any = sub, **kw: Any) -> argparse.ArgumentParser:
        kw.setdefault("description", kw.get("help"))
        sp: argparse.ArgumentParser = parent.add_parser(name, **kw)
        sp.set_defaults(handler=handler)
        sp.add_argument("--json", action="store_true", help="print one JSON document")
        return sp

    def group(name: str, help: str) -> Any:
        g = sub.add_parser(name, help=help, description=help)
        return g.add_subparsers(dest=f"{name}_command", required=True, parser_class=_Parser,
                                title="commands", metavar="COMMAND")  # fmt: skip

    def endpoint_id(sp: argparse.ArgumentParser) -> None:
        sp.add_argument("id", type=int, help="the endpoint's id")

    cmd("migrate", cmd_migrate, help="apply schema migrations (idempotent, safe in parallel)")

    eps = group("endpoint", "manage endpoints: add, list, delete, secrets, health")
    add = cmd("add", cmd_endpoint_add, eps, help="create an endpoint (prints its secret once)")
    add.add_argument("--url", required=True,
                     help="where deliveries go; {field} macros in path/query")  # fmt: skip
    add.add_argument("--name", help="a label for people: lists and the dashboard show it")
    add.add_argument("--description", help="a longer note on what the endpoint is for")
    add.add_argument("--secret", help="whsec_… or whsk_… (default: a new one is generated)")
    add.add_argument("--event-type", action="extend", nargs="+", metavar="T",
                     help="subscribe to these types (default: every type)")  # fmt: skip
    for flag, kind, text in ENDPOINT_FLAGS:
        add.add_argument(flag, type=kind, default=None, help=text)
    add.add_argument("--header", action="append", metavar="'NAME: VALUE'",
                     help="an extra request header (repeatable)")  # fmt: skip
    for flag, choices, text in SHAPING_FLAGS:
        upper = flag == "--method"  # GET and get alike
        add.add_argument(flag, choices=choices, default=None, help=text,
                         type=str.upper if upper else str)  # fmt: skip
    add.add_argument(
        "--signature",
        choices=("v1", "v1a"),
        default=None,
        help="v1: HMAC-SHA256 (whsec_); v1a: ed25519 (whsk_; receivers verify with whpk_)",
    )
    add.add_argument("--app", metavar="ID", help="the application it belongs to (default: default)")
    add_endpoint_flags(add)
    ls = cmd("list", cmd_endpoint_list, eps, help="all endpoints with their settings")
    ls.add_argument("--app", metavar="ID", help="only this application's")
    rot = cmd("rotate-secret", cmd_endpoint_rotate, eps,
              help="new secret; the old one keeps signing for a grace period")  # fmt: skip
    endpoint_id(rot)
    rot.add_argument(
        "--grace-s",
        type=float,
        default=None,
        help=f"seconds the old secret keeps signing (default: {service.DEFAULT_GRACE_S:g})",
    )
    for name, enabled, text in (("disable", False, "stop deliveries to it; nothing queued is lost"),
                                ("enable", True, "resume deliveries to it")):  # fmt: skip
        endpoint_id(cmd(name, _toggle(enabled), eps, help=text))
    upd = cmd("update", cmd_endpoint_update, eps,
              help="change an endpoint in place: same id, same secret; flags not given stay",
              epilog="Each flag replaces that setting (--event-type and --header the whole "
                     "set); the defaults shown are endpoint add's.")  # fmt: skip
    endpoint_id(upd)
    _update_flags(add, upd)
    cmd("health", cmd_endpoint_health, eps,
        help="per endpoint: breaker state, consecutive failures, p50/p95/p99")  # fmt: skip
    rm = cmd("delete", cmd_endpoint_delete, eps,
             help="delete it (refused while it has queued deliveries, unless --force)")  # fmt: skip
    endpoint_id(rm)
    rm.add_argument(
        "--force",
        action="store_true",
        help="dead-letter its queued deliveries first ('endpoint deleted')",
    )
    add_postback_commands(cmd, group, eps)

    enq = cmd("enqueue", cmd_enqueue, help="queue an event (or a JSONL file of them)")
    enq.add_argument("--event-type", metavar="T", help="the event's type (picks subscribers)")
    enq.add_argument(
        "--payload",
        metavar="JSON|@FILE|-",
        help="the JSON body, sent byte for byte: inline, @FILE for a file's bytes, - for stdin",
    )
    enq.add_argument("--event-id", metavar="ID",
                     help="idempotency key: the same id again queues nothing new")  # fmt: skip
    enq.add_argument("--endpoint", type=int, metavar="ID", help="only this endpoint")
    enq.add_argument("--app", metavar="ID",
                     help="the application whose endpoints get it (default: default; "
                          "JSONL lines may carry their own \"app\")")  # fmt: skip
    enq.add_argument(
        "--file", metavar="EVENTS.jsonl", help="bulk: one event document per line (- for stdin)"
    )
    add_enqueue_flags(enq)

    run = cmd("run", cmd_run, help="the worker: deliver what is due until stopped")
    run.add_argument(
        "--drain",
        action="store_true",
        help="exit 0 once nothing is due and sendable and nothing is in flight",
    )
    run.add_argument("--max-in-flight", type=int, metavar="N",
                     help="fix the requests in flight in this process (default: sized from "
                          "the event loop's headroom, 256..5000, from 1000)")  # fmt: skip
    run.add_argument("--batch-size", type=int, metavar="N",
                     help="rows claimed per statement (default: 500)")  # fmt: skip
    run.add_argument("--http", metavar="HOST:PORT", help="also serve the admin API here "
                     "(with --processes: process i on PORT+i)")  # fmt: skip
    run.add_argument("--processes", metavar="N|auto",
                     help="run N worker processes under one supervising parent "
                          "(auto: one per core)")  # fmt: skip

    serve = cmd("serve", cmd_serve, help="the admin API alone, delivering nothing")
    serve.add_argument("--http", metavar="HOST:PORT", required=True,
                       help="where to listen (e.g. 127.0.0.1:8080)")  # fmt: skip

    cmd("alerts", cmd_alerts, help="the three alert conditions, each with its value")
    cmd("health", cmd_health, help="the one-row pipeline summary")
    slow = cmd("slow", cmd_slow, help="endpoints whose rolling p95 is over a threshold")
    slow.add_argument("--p95-ms", type=float, default=None,
                      help=f"the threshold (default: {reports.DEFAULT_P95_MS:g})")  # fmt: skip

    dlqs = group("dlq", "dead letters: analyze, replay")
    an = cmd(
        "analyze",
        cmd_dlq_analyze,
        dlqs,
        help="per endpoint: count, primary error and status, pattern, suggested action",
    )
    an.add_argument(
        "--hours",
        type=float,
        default=None,
        help=f"look back this far (default: {reports.DEFAULT_DLQ_HOURS:g})",
    )
    rp = cmd("replay", cmd_dlq_replay, dlqs,
             help="move dead letters back to pending with a fresh attempt budget")  # fmt: skip
    rp.add_argument("--id", type=int, action="extend", nargs="+", help="these dead letters")
    rp.add_argument("--endpoint", type=int, metavar="ID", help="or this endpoint's")
    rp.add_argument("--since", metavar="ISO-TIME", help="with --endpoint: those dead since")
    rp.add_argument("--until", metavar="ISO-TIME", help="with --endpoint: those dead before")
    rp.add_argument(
        "--limit",
        type=int,
        default=None,
        help=f"at most this many per call (default: {service.DEFAULT_REPLAY_LIMIT})",
    )

    add_app_commands(cmd, group)
    add_event_type_commands(cmd, group)
    add_ops_webhook_commands(cmd, group)

    add_wake_command(cmd)

    dbs = group("db", "the embedded PostgreSQL (used when DATABASE_URL is unset)")
    cmd("status", cmd_db_status, dbs, help="embedded or not, running or not, its URL and data")
    cmd("url", cmd_db_url, dbs, help="the URL to connect with (starts the embedded server)")
    cmd("stop", cmd_db_stop, dbs, help="stop the embedded server (nothing to do with DATABASE_URL)")

    demo = cmd("demo", cmd_demo, help="see it work on local receivers")
    demo.add_argument("--events", type=int, default=300, help="how many events (default: 300)")
    demo.add_argument("--database", default="dispatcher_demo",
                      help="the database the demo (re)creates on the server")  # fmt: skip
    demo.add_argument(
        "--http",
        default="127.0.0.1:0",
        metavar="HOST:PORT",
        help="where the dashboard is served during the demo",
    )
    demo.add_argument("--keep", action="store_true",
                      help="after the story, keep the worker, receivers and dashboard up "
                           "until Ctrl-C")  # fmt: skip
    demo.add_argument("--linger-s", type=float, default=0.0,
                      help="keep the dashboard up this long after the story")  # fmt: skip

    bench = cmd(
        "bench",
        cmd_bench,
        add_help=False,
        help="the benchmark harness (`dispatcher bench --help` for its own flags)",
    )
    bench.add_argument("bench_args", nargs=argparse.REMAINDER, help="the harness's arguments")
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
    except db.DATABASE_ERRORS as exc:
        sys.stderr.write(f"dispatcher: error: {db.one_line(exc)}\n")
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
