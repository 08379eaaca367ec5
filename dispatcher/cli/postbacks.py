"""Postback tooling on the command line (SPEC "Postback tooling"): the
endpoint flags (macro style, value map, auto-disable), enqueue's schedule
(--deliver-at, --delay-s, --hold), `event release|cancel` and `endpoint
test`. Kept apart from main.py's parser so the two change independently."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any

import asyncpg

from dispatcher.cli.common import Handler, emit, report, row_id, with_conn
from dispatcher.core.errors import BadInput
from dispatcher.core.models import TEST_EVENT_TYPE
from dispatcher.ops import service
from dispatcher.ops.inputs import check_event_type, payload_text, read_payload
from dispatcher.settings import Settings

Cmd = Callable[..., argparse.ArgumentParser]


def add_endpoint_flags(add: argparse.ArgumentParser) -> None:
    """Flags of `endpoint add`, each named after its EndpointSpec field."""
    add.add_argument("--macro-style", dest="macro_style", choices=("brace", "hash", "double"),
                     help="how URL macros are spelt: {name}, #name# (CAKE) or {{name}} "
                          "(default: brace)")  # fmt: skip
    add.add_argument("--map", dest="value_map", metavar="JSON",
                     help='per macro, value → partner code: \'{"status": {"approved": "1", '
                          '"*": "0"}}\'')  # fmt: skip
    add.add_argument("--disable-after", dest="disable_after", type=int, metavar="N",
                     help="disable the endpoint after N consecutive failed attempts "
                          "(with --within-s)")  # fmt: skip
    add.add_argument("--within-s", dest="disable_within_s", type=float, metavar="S",
                     help="… the first no more than S seconds before the last")  # fmt: skip


def add_enqueue_flags(enq: argparse.ArgumentParser) -> None:
    enq.add_argument("--deliver-at", metavar="ISO-TIME", help="not sent before this time")
    enq.add_argument(
        "--delay-s", type=float, metavar="S", help="not sent before S seconds from now"
    )
    enq.add_argument("--hold", action="store_true",
                     help="held: sent only after `dispatcher event release EVENT_ID`")  # fmt: skip


def schedule(args: argparse.Namespace) -> dict[str, Any]:
    """enqueue's scheduling flags, as service.enqueue takes them."""
    if args.file is not None and (args.hold or args.deliver_at or args.delay_s is not None):
        raise BadInput("--hold, --deliver-at and --delay-s apply to one event, not --file")
    return {"deliver_at": args.deliver_at, "delay_s": args.delay_s, "hold": args.hold}


async def cmd_endpoint_test(args: argparse.Namespace, settings: Settings) -> int:
    body = payload_text(
        read_payload(args.payload) if args.payload is not None else service.test_payload(args.id),
        settings.max_payload_bytes,
    ).encode()
    event_type = check_event_type(args.event_type or TEST_EVENT_TYPE)
    # Imported here: the sender brings aiohttp, which no other command of
    # this module needs, and every CLI start would pay for it.
    from dispatcher.worker import testshot

    shots: list[testshot.Shot] = []

    async def begin(conn: asyncpg.Connection) -> int:
        shots.append(await testshot.begin(conn, settings, args.id))
        return 0

    async def end(conn: asyncpg.Connection) -> int:
        await testshot.end(conn, shots[0])
        return 0

    # No connection held while the shot is out (at most 10 s): one to read
    # the endpoint and take the application's lease, another to give it back.
    await with_conn(settings, begin)
    try:
        doc = await testshot.fire(settings, shots[0], body, event_type=event_type)
    finally:
        await with_conn(settings, end)
    emit(args, doc, lambda: _show(doc))
    return 0 if doc["delivered"] else 1


def _show(doc: dict[str, Any]) -> None:
    if not doc["sent"]:
        print(f"not sent: {doc['error']}")
        return
    print(f"{doc['method']} {doc['url']}")
    status = doc["status_code"] if doc["status_code"] is not None else "no answer"
    error = f" ({doc['error']})" if doc["error"] else ""
    print(f"status {status}{error} in {doc['latency_ms']} ms")
    if doc["body"]:
        more = " …(first 2 KiB)" if doc["body_truncated"] else ""
        print(doc["body"] + more)


def _event_action(name: str) -> Handler:
    op = service.release_event if name == "release" else service.cancel_event
    done = "released" if name == "release" else "cancelled"

    async def handler(args: argparse.Namespace, settings: Settings) -> int:
        return await report(
            args,
            settings,
            lambda conn: op(conn, args.event_id, args.app),
            lambda doc: print(f"event {doc['event_id']}: {done} {doc[done]}"),
        )

    return handler


def add_postback_commands(cmd: Cmd, group: Callable[[str, str], Any], eps: Any) -> Any:
    """Returns the `event` group (cli/erasure.py adds `expunge`)."""
    test = cmd("test", cmd_endpoint_test, eps,
               help="send one request now, outside the queue; print status, latency and "
                    "the answer (nothing is stored)")  # fmt: skip
    test.add_argument("id", type=row_id, help="the endpoint's id")
    test.add_argument("--payload", metavar="JSON|@FILE|-",
                      help="the event's payload (default: a dispatcher.test document)")  # fmt: skip
    test.add_argument("--event-type", metavar="T",
                      help=f"the event's type (default: {TEST_EVENT_TYPE})")  # fmt: skip
    events = group("event", "one event: release or cancel its held deliveries, erase its payload")
    for name, text in (
        ("release", "send the event's held deliveries"),
        ("cancel", "end the event's deliveries not yet sent (status cancelled)"),
    ):
        sp = cmd(name, _event_action(name), events, help=text)
        sp.add_argument("event_id", metavar="EVENT_ID", help="the event id given at enqueue")
        sp.add_argument("--app", metavar="ID", help="the event's application (default: default)")
    return events
