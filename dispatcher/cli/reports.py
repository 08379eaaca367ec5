"""`dispatcher alerts|health|slow` and `dispatcher dlq analyze|replay`: the reports.

An entry point like the rest of the CLI (dispatcher.cli.main.main builds
the parser and calls `add_report_commands`; `dlq list` is deliveries.py's,
added to the same group). The reports are ops.reports'; this module picks
their flags and prints them (views.py, tables), and replays dead letters
through ops.service.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from typing import Any

import asyncpg

from dispatcher.cli import views
from dispatcher.cli.common import emit, report, row_id, table, with_conn
from dispatcher.cli.deliveries import add_dlq_list
from dispatcher.core.errors import BadInput
from dispatcher.ops import reports, service
from dispatcher.settings import Settings


async def cmd_health(args: argparse.Namespace, settings: Settings) -> int:
    return await report(args, settings, reports.health_summary, views.health)


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


def add_report_commands(
    cmd: Callable[..., argparse.ArgumentParser], group: Callable[[str, str], Any]
) -> None:
    cmd("alerts", cmd_alerts, help="the three alert conditions, each with its value")
    cmd("health", cmd_health, help="the one-row pipeline summary")
    slow = cmd("slow", cmd_slow, help="endpoints whose rolling p95 is over a threshold")
    slow.add_argument("--p95-ms", type=float, default=None,
                      help=f"the threshold (default: {reports.DEFAULT_P95_MS:g})")  # fmt: skip

    dlqs = group("dlq", "dead letters: list, analyze, replay")
    add_dlq_list(cmd, dlqs)
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
    rp.add_argument("--id", type=row_id, action="extend", nargs="+", help="these dead letters")
    rp.add_argument("--endpoint", type=int, metavar="ID", help="or this endpoint's")
    rp.add_argument("--since", metavar="ISO-TIME", help="with --endpoint: those dead since")
    rp.add_argument("--until", metavar="ISO-TIME", help="with --endpoint: those dead before")
    rp.add_argument(
        "--limit",
        type=int,
        default=None,
        help=f"at most this many per call (default: {service.DEFAULT_REPLAY_LIMIT})",
    )
