"""`dispatcher event expunge` and `dispatcher app expunge`: erase payloads
(SPEC "History, payloads and retention"; ops/erasure.py says what stays).

An entry point like the rest of the CLI (dispatcher.cli.main.main builds
the parser and calls `add_erasure_commands`). `--json` prints
`{"expunged": n}`.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any

from dispatcher.cli.common import report
from dispatcher.ops import erasure
from dispatcher.settings import Settings


def _said(doc: dict[str, int]) -> None:
    n = doc["expunged"]
    print(f"{n} event payload{'' if n == 1 else 's'} erased" + ("" if n else " (none left)"))


async def cmd_event_expunge(args: argparse.Namespace, settings: Settings) -> int:
    return await report(
        args, settings, lambda conn: erasure.expunge_event(conn, args.event_id, args.app), _said
    )


async def cmd_app_expunge(args: argparse.Namespace, settings: Settings) -> int:
    contains = erasure.parse_contains_flag(args.payload_contains)
    return await report(
        args,
        settings,
        lambda conn: erasure.expunge(conn, args.id, before=args.before, payload_contains=contains),
        _said,
    )


def add_erasure_commands(
    cmd: Callable[..., argparse.ArgumentParser], events: Any, apps: Any
) -> None:
    ev = cmd("expunge", cmd_event_expunge, events,
             help="erase the event's payload now (its deliveries stay, payload_expired; what "
                  "is not sent yet is cancelled)")  # fmt: skip
    ev.add_argument("event_id", metavar="EVENT_ID", help="the event id given at enqueue")
    ev.add_argument("--app", metavar="ID",
                    help="the event's application (default: the one that has it)")  # fmt: skip
    ap = cmd("expunge", cmd_app_expunge, apps,
             help="erase the application's payloads (enqueued before --before; those whose "
                  "fields match --payload-contains)")  # fmt: skip
    ap.add_argument("id", help="the application")
    ap.add_argument("--before", metavar="ISO-TIME",
                    help="only what was enqueued before this time")  # fmt: skip
    ap.add_argument("--payload-contains", metavar="KEY=VALUE", action="append", default=[],
                    help="only payloads whose top-level KEY equals VALUE (JSON, else text); "
                         "repeat for several fields")  # fmt: skip
