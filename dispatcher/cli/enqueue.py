"""`dispatcher enqueue`: one event (its flags, or --payload JSON) or a JSONL file of them.

An entry point like the rest of the CLI (dispatcher.cli.main.main builds
the parser and calls `add_enqueue_command`; the schedule flags,
--deliver-at, --delay-s and --hold, are postbacks.py's). The payload is
kept byte for byte; an event nobody takes is said on stderr, not an error.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable

from dispatcher.cli.common import report, row_id
from dispatcher.cli.format import plural
from dispatcher.cli.postbacks import add_enqueue_flags
from dispatcher.cli.postbacks import schedule as enqueue_schedule
from dispatcher.core.errors import BadInput
from dispatcher.ops import service
from dispatcher.ops.inputs import read_payload
from dispatcher.settings import Settings


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
            lambda doc: print(
                f"{plural(doc['events'], 'event', 'events')} read, "
                f"{plural(doc['deliveries'], 'delivery', 'deliveries')} queued"
            ),
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
        lambda doc: print(f"event {doc['event_id']}: {_deliveries(doc['deliveries'])}"),
        note=lambda doc: None if doc["deliveries"] else _nobody_takes(args),
    )


def _deliveries(ids: list[int]) -> str:
    """Its deliveries and their ids (`delivery show ID`); the same words
    for an event id seen before, which answers the deliveries it has."""
    if not ids:
        return "no delivery"
    label = "id" if len(ids) == 1 else "ids"
    return f"{plural(len(ids), 'delivery', 'deliveries')} ({label} {', '.join(map(str, ids))})"


def _nobody_takes(args: argparse.Namespace) -> None:
    """An event nobody takes is not an error (a producer may run ahead of
    its subscribers), but a person typing it wants to know."""
    who = (f"endpoint {args.endpoint} does not take" if args.endpoint is not None
           else f"no enabled endpoint of application {args.app or 'default'} takes")  # fmt: skip
    sys.stderr.write(
        f"dispatcher: nothing queued: {who} event type {args.event_type} "
        "(not subscribed, or a filter did not match)\n"
    )


def add_enqueue_command(cmd: Callable[..., argparse.ArgumentParser]) -> None:
    enq = cmd("enqueue", cmd_enqueue, help="queue an event (or a JSONL file of them)")
    enq.add_argument("--event-type", metavar="T", help="the event's type (picks subscribers)")
    enq.add_argument(
        "--payload",
        metavar="JSON|@FILE|-",
        help="the JSON body, sent byte for byte: inline, @FILE for a file's bytes, - for stdin",
    )
    enq.add_argument("--event-id", metavar="ID",
                     help="idempotency key: the same id again queues nothing new")  # fmt: skip
    enq.add_argument("--endpoint", type=row_id, metavar="ID", help="only this endpoint")
    enq.add_argument("--app", metavar="ID",
                     help="the application whose endpoints get it (default: default; "
                          "JSONL lines may carry their own \"app\")")  # fmt: skip
    enq.add_argument(
        "--file", metavar="EVENTS.jsonl", help="bulk: one event document per line (- for stdin)"
    )
    add_enqueue_flags(enq)
