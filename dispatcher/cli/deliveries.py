"""`dispatcher dlq list` and `dispatcher delivery list|show`: the ids the
other commands need, and one delivery's story.

An entry point like the rest of the CLI (dispatcher.cli.main.main builds
the parser and calls `add_delivery_commands`; reports.py adds `dlq list`
to its `dlq` group with `add_dlq_list`). The rows are those of the HTTP
routes: ops.reports.dead_letters (the body of GET /v1/dead-letters),
ops.browse.list_deliveries (GET /v1/deliveries) and ops.browse.get_delivery
(GET /v1/deliveries/{id}); `--json` prints them as those routes answer.
This module only picks flags and lays the rows out for a terminal.
"""

from __future__ import annotations

import argparse
from collections.abc import Awaitable, Callable
from datetime import datetime
from typing import Any

import orjson

from dispatcher.cli.common import report, row_id
from dispatcher.cli.format import plural, print_table, wrap
from dispatcher.db import Conn
from dispatcher.ops import browse, reports
from dispatcher.settings import Settings

# What one row shows of texts that can be long (event ids, types, errors):
# the whole text is in `delivery show` and in --json.
CAPS = {"event_id": 18, "event_type": 18, "result": 28}
HEADERS = {"endpoint_id": "endpoint", "event_id": "event", "event_type": "type",
           "result": "last result", "dead_at": "died"}  # fmt: skip
# Above this many rows, a replay command listing every id is too long to copy.
MAX_IDS_IN_HINT = 10


def result(status_code: int | None, error: str | None) -> str:
    """An attempt's outcome in a few words, as the console says it."""
    if status_code is None:
        return error or "-"
    if not error or error.startswith("HTTP "):
        return f"HTTP {status_code}"
    return f"HTTP {status_code}: {error}"


def _short(at: Any) -> Any:
    # UTC, as the database has it; the year only in `delivery show`.
    return at.strftime("%m-%d %H:%M:%S") if isinstance(at, datetime) else at


def _full(at: datetime | None) -> str:
    return "-" if at is None else at.strftime("%Y-%m-%d %H:%M:%S UTC")


def _say(text: str) -> None:
    for line in wrap(text):
        print(line)


# ---------------------------------------------------------------- dlq list


def dlq_list_view(rows: list[dict[str, Any]], limit: int) -> None:
    """The dead letters, newest first, and the two commands that take their ids."""
    shown = [
        {**r, "dead_at": _short(r["dead_at"]),
         "result": result(r["last_status_code"], r["last_error"])}
        for r in rows
    ]  # fmt: skip
    print_table(shown, ["id", "endpoint_id", "event_id", "event_type", "attempt_count",
                        "dead_at", "result"],
                headers={**HEADERS, "attempt_count": "attempts"}, cap=CAPS)  # fmt: skip
    if not rows:
        return
    ids = [str(r["id"]) for r in rows]
    them = "it" if len(ids) == 1 else "them"
    replay = (
        f"`dispatcher dlq replay --id {' '.join(ids)}`"
        if len(ids) <= MAX_IDS_IN_HINT
        else "`dispatcher dlq replay --id ID …` (or `--endpoint ID`)"
    )
    more = f" (the newest {limit}: --limit N for more)" if len(rows) >= limit else ""
    _say(
        f"{plural(len(rows), 'dead letter', 'dead letters')}{more}. "
        f"`dispatcher delivery show {ids[0]}` shows every attempt; {replay} requeues {them}."
    )


async def cmd_dlq_list(args: argparse.Namespace, settings: Settings) -> int:
    limit = reports.DEFAULT_DEAD_LETTERS if args.limit is None else args.limit
    return await report(
        args,
        settings,
        lambda conn: reports.dead_letters(conn, args.endpoint, args.limit, args.app),
        lambda rows: dlq_list_view(rows, min(limit, reports.MAX_DEAD_LETTERS)),
    )


def add_dlq_list(cmd: Callable[..., argparse.ArgumentParser], dlqs: Any) -> None:
    ls = cmd("list", cmd_dlq_list, dlqs,
             help="the newest dead letters: ids, endpoints, attempts, last results")  # fmt: skip
    ls.add_argument("--endpoint", type=row_id, metavar="ID", help="only this endpoint's")
    ls.add_argument("--app", metavar="ID", help="only this application's")
    ls.add_argument("--limit", type=int, metavar="N",
                    help=f"at most this many (default: {reports.DEFAULT_DEAD_LETTERS}, "
                         f"at most {reports.MAX_DEAD_LETTERS})")  # fmt: skip


# ---------------------------------------------------------------- delivery list


def delivery_list_view(doc: dict[str, Any]) -> None:
    rows = [
        {**d, "created_at": _short(d["created_at"]),
         "attempts": _budget(d),
         "result": result(d["last_status_code"], d["last_error"])}
        for d in doc["deliveries"]
    ]  # fmt: skip
    print_table(rows, ["id", "endpoint_id", "event_id", "event_type", "status", "attempts",
                       "result", "created_at"],
                headers={**HEADERS, "created_at": "created"}, cap=CAPS)  # fmt: skip
    if doc["next_cursor"] is not None:
        _say(f"more: the same command with `--cursor {doc['next_cursor']}`")


async def cmd_delivery_list(args: argparse.Namespace, settings: Settings) -> int:
    def fetch(conn: Conn) -> Awaitable[dict[str, Any]]:
        return browse.list_deliveries(
            conn, app=args.app, status=args.status, endpoint_id=args.endpoint,
            event_type=args.event_type, event_id=args.event_id, since=args.since,
            until=args.until, cursor=args.cursor, limit=args.limit,
        )  # fmt: skip

    return await report(args, settings, fetch, delivery_list_view)


# ---------------------------------------------------------------- delivery show


def _earlier(d: dict[str, Any]) -> int:
    """Attempts made before its last replay: a replay starts a fresh budget
    (attempt_count back to 0) and keeps the attempts made before it. Only a
    delivery read with its attempts (`show`, `list --event-id`) tells."""
    recorded: int = len(d.get("attempts") or ())
    return max(0, recorded - int(d["attempt_count"]))


def _budget(d: dict[str, Any]) -> str:
    budget = f"{d['attempt_count']} of {d['max_attempts']}"
    return f"{budget}, replayed" if _earlier(d) else budget


def _attempts_line(d: dict[str, Any]) -> str:
    budget = f"{d['attempt_count']} of {d['max_attempts']}"
    if earlier := _earlier(d):
        said = plural(earlier, "earlier attempt", "earlier attempts")
        return f"{budget} since it was replayed, after {said}"
    if len(d["attempts"]) < d["attempt_count"]:
        return f"{budget} (the older attempts are past their retention)"
    return budget


def _status_line(d: dict[str, Any]) -> str:
    status = d["status"]
    if status == "delivered":
        return f"delivered {_full(d['delivered_at'])}"
    if status == "dead_letter":
        return f"dead_letter, no more attempts: `dispatcher dlq replay --id {d['id']}` requeues it"
    if status in ("pending", "failed"):
        what = "retry" if status == "failed" else "next attempt"
        return f"{status}, {what} at {_full(d['next_attempt_at'])}"
    return str(status)


def delivery_show_view(d: dict[str, Any]) -> None:
    print(f"delivery {d['id']}: {d['event_type']} to endpoint {d['endpoint_id']} "
          f"(application {d['app']})")  # fmt: skip
    last = result(d["last_status_code"], d["last_error"])
    if d["last_response_ms"] is not None:
        last += f" in {d['last_response_ms']} ms"
    facts = [("event", d["event_id"]), ("status", _status_line(d)),
             ("attempts", _attempts_line(d)), ("created", _full(d["created_at"])),
             ("last result", last if d["attempt_count"] or d["attempts"] else "-")]  # fmt: skip
    for name, value in facts:
        print(f"{name:<12} {value}")
    print("\nattempts")
    earlier = _earlier(d)
    rows = [
        {"#": i + 1, "at": _full(a["at"]), "result": result(a["status_code"], a["error"]),
         "response": f"{a['response_ms']} ms",
         "note": "the first after the replay" if earlier and i == earlier else None}
        for i, a in enumerate(d["attempts"])
    ]  # fmt: skip
    if rows:
        print_table(rows, ["#", "at", "result", "response", "note"], cap={"result": 60})
        _details(d["attempts"])
    else:
        print("(none yet)")
    print("\npayload")
    if d.get("payload_expired"):
        print("(erased: expunged, or past DISPATCHER_RETENTION_PAYLOAD_S)")
    else:
        print(orjson.dumps(d["payload"], option=orjson.OPT_INDENT_2).decode())


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value:g}"


def _details(attempts: list[dict[str, Any]]) -> None:
    """What each attempt recorded (schema 024): timings, who answered, the
    answer's headers and first bytes, a postback's URL as fired."""
    print("\nattempt details (ms: dns / connect / tls / first byte / total)")
    for i, a in enumerate(attempts):
        t = a.get("timings_ms") or {}
        line = " / ".join(_ms(t.get(k)) for k in ("dns", "connect", "tls", "ttfb", "total"))
        if a.get("remote_addr"):
            line += f"   from {a['remote_addr']}"
        print(f"{i + 1:<3}{line}")
        if a.get("request_url"):
            print(f"   url       {a['request_url']}")
        if a.get("response_headers"):
            shown = "; ".join(f"{k}: {v}" for k, v in a["response_headers"].items())
            print(f"   headers   {shown[:300]}")
        if a.get("response_excerpt"):
            print(f"   response  {a['response_excerpt'][:300]!r}")


async def cmd_delivery_show(args: argparse.Namespace, settings: Settings) -> int:
    return await report(
        args, settings, lambda conn: browse.get_delivery(conn, args.id), delivery_show_view
    )


def add_delivery_commands(
    cmd: Callable[..., argparse.ArgumentParser], group: Callable[[str, str], Any]
) -> None:
    dels = group("delivery", "deliveries: list them by any field, show one with its attempts")
    ls = cmd("list", cmd_delivery_list, dels,
             help="deliveries newest first, filtered as GET /v1/deliveries")  # fmt: skip
    ls.add_argument("--status", choices=reports.STATUSES, help="only those in this status")
    ls.add_argument("--endpoint", "--endpoint-id", dest="endpoint", type=row_id, metavar="ID",
                    help="only this endpoint's")  # fmt: skip
    ls.add_argument("--app", metavar="ID", help="only this application's")
    ls.add_argument("--event-type", metavar="T", help="only events of this type")
    ls.add_argument("--event-id", metavar="ID", help="only this event's (one per endpoint)")
    ls.add_argument("--since", metavar="ISO-TIME", help="only those created at or after")
    ls.add_argument("--until", metavar="ISO-TIME", help="only those created before")
    ls.add_argument("--cursor", help="the next page: the cursor the page before printed")
    ls.add_argument("--limit", type=int, metavar="N",
                    help=f"a page of this many (default: {browse.DEFAULT_LIMIT}, "
                         f"at most {browse.MAX_LIMIT})")  # fmt: skip
    show = cmd("show", cmd_delivery_show, dels,
               help="one delivery: its status, every attempt (replays too), payload")  # fmt: skip
    show.add_argument("id", type=row_id, help="the delivery's id (`delivery list`, `dlq list`)")
