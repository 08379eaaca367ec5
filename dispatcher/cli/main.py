"""The command line: `dispatcher …` and `python -m dispatcher …`.

An entry point: it wires settings, the database and the engine together.
This module owns the parser and its command table (which area adds which
commands, in the order `--help` lists them) and `main`, which runs one
command; the commands themselves are their area's: endpoints.py,
enqueue.py, reports.py, apps.py, eventtypes.py, opswebhooks.py,
postbacks.py, wake.py, dbcommands.py, run.py. Every error reaches the user
as one line on stderr (exit 2 for bad input, 1 for operational failure);
`--json` prints exactly one document on stdout.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Coroutine, Sequence
from typing import Any

from dispatcher import db
from dispatcher.cli.apps import add_app_commands
from dispatcher.cli.common import Handler, emit
from dispatcher.cli.dbcommands import cmd_db_status, cmd_db_stop, cmd_db_url
from dispatcher.cli.deliveries import add_delivery_commands
from dispatcher.cli.endpoints import add_endpoint_commands
from dispatcher.cli.enqueue import add_enqueue_command
from dispatcher.cli.erasure import add_erasure_commands
from dispatcher.cli.eventtypes import add_event_type_commands
from dispatcher.cli.help import OVERVIEW
from dispatcher.cli.opswebhooks import add_ops_webhook_commands
from dispatcher.cli.parser import Parser as _Parser
from dispatcher.cli.postbacks import add_postback_commands
from dispatcher.cli.reports import add_report_commands
from dispatcher.cli.run import cmd_bench, cmd_demo, cmd_run, cmd_serve
from dispatcher.cli.wake import add_wake_command
from dispatcher.core.errors import DispatcherError
from dispatcher.db.embedded import resolve_database_url
from dispatcher.settings import Settings
from dispatcher.version import __version__

# ---------------------------------------------------------------- commands


async def cmd_migrate(args: argparse.Namespace, settings: Settings) -> int:
    url = resolve_database_url(settings.database_url, settings.home)
    conn = await db.connect(url)
    try:
        applied = await db.migrate(conn, settings.retention)
    finally:
        await conn.close()
    emit(
        args,
        {"applied": applied, "current": True},
        lambda: print(f"applied {len(applied)} migration(s); schema is current"),
    )
    return 0


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

    cmd("migrate", cmd_migrate, help="apply schema migrations (idempotent, safe in parallel)")
    eps = add_endpoint_commands(cmd, group)
    events = add_postback_commands(cmd, group, eps)
    add_enqueue_command(cmd)

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

    add_report_commands(cmd, group)
    add_delivery_commands(cmd, group)

    apps = add_app_commands(cmd, group)
    add_erasure_commands(cmd, events, apps)
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
    except KeyboardInterrupt:  # Ctrl-C before a command set its own handler
        sys.stderr.write("dispatcher: interrupted\n")
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
