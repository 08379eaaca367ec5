"""`dispatcher event-type …`: the event-type catalogue (SPEC "Event types").

An entry point like the rest of the CLI (dispatcher.cli.main.main builds the
parser and calls `add_event_type_commands`). Without --app a command
addresses the catalogue-wide scope; with it, that application's own types
(and `list` shows the catalogue-wide ones beside them).
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any

import orjson

from dispatcher.cli.common import Handler, report, table
from dispatcher.core.errors import BadInput
from dispatcher.ops import eventtypes
from dispatcher.ops.inputs import read_text_file
from dispatcher.settings import Settings

TYPE_COLUMNS = ["name", "app", "description", "archived", "has_schema", "updated_at"]
MAX_SCHEMA_BYTES = 1 << 20


def read_schema(value: str) -> Any:
    """--schema: JSON text when it starts with `{`, else a file holding it."""
    text = value if value.lstrip().startswith("{") else read_text_file(
        value, "--schema", MAX_SCHEMA_BYTES)  # fmt: skip
    try:
        return orjson.loads(text)
    except orjson.JSONDecodeError as exc:
        raise BadInput(f"--schema is not valid JSON: {exc}") from None


async def cmd_event_type_add(args: argparse.Namespace, settings: Settings) -> int:
    schema = None if args.schema is None else read_schema(args.schema)  # exit 2 before connecting
    return await report(
        args,
        settings,
        lambda conn: eventtypes.add_event_type(
            conn, args.name, description=args.description, schema=schema, app=args.app
        ),
        lambda doc: print(f"event type {doc['name']} added ({_scope(doc)})"),
    )


def _scope(doc: dict[str, Any]) -> str:
    return "catalogue-wide" if doc["app"] is None else f"application {doc['app']}"


async def cmd_event_type_list(args: argparse.Namespace, settings: Settings) -> int:
    show = table(TYPE_COLUMNS)
    return await report(
        args,
        settings,
        lambda conn: eventtypes.list_event_types(conn, args.app, args.include_archived),
        lambda rows: show([{**r, "has_schema": r["schema"] is not None} for r in rows]),
    )


def _archive(archived: bool) -> Handler:
    state = "archived" if archived else "unarchived"

    async def handler(args: argparse.Namespace, settings: Settings) -> int:
        return await report(
            args,
            settings,
            lambda conn: eventtypes.archive_event_type(conn, args.name, args.app, archived),
            lambda doc: print(f"event type {doc['name']} {state} ({_scope(doc)})"),
        )

    return handler


def add_event_type_commands(
    cmd: Callable[..., argparse.ArgumentParser], group: Callable[[str, str], Any]
) -> None:
    types = group("event-type", "the event-type catalogue: add, list, archive")
    scope = "the application whose own type it is (default: catalogue-wide)"
    add = cmd("add", cmd_event_type_add, types,
              help="add an event type (a name taken in its scope: exit 2)")  # fmt: skip
    add.add_argument("name", help="1-256 of A-Z, a-z, 0-9, _, . and -")
    add.add_argument("--description", help="what the event means, for subscribers")
    add.add_argument("--schema", metavar="FILE_OR_JSON",
                     help="a JSON Schema (draft 2020-12) payloads must match at enqueue: "
                          "inline JSON, or a file holding it")  # fmt: skip
    add.add_argument("--app", metavar="ID", help=scope)
    ls = cmd("list", cmd_event_type_list, types,
             help="the catalogue-wide types, and with --app, the application's own")  # fmt: skip
    ls.add_argument("--app", metavar="ID", help="also this application's own types")
    ls.add_argument("--include-archived", action="store_true", help="archived types too")
    for name, archived, text in (
        ("archive", True, "refuse new events of this type (it stays listed)"),
        ("unarchive", False, "accept events of an archived type again"),
    ):
        sp = cmd(name, _archive(archived), types, help=text)
        sp.add_argument("name", help="the event type")
        sp.add_argument("--app", metavar="ID", help=scope)
