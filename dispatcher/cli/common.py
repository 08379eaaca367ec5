"""What every CLI command shares: one operation on one connection, its
result printed as one JSON document (`--json`) or for people."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Awaitable, Callable, Coroutine, Sequence
from typing import Any

import asyncpg

from dispatcher import db
from dispatcher.cli.format import print_table
from dispatcher.core.encoding import to_json
from dispatcher.db.embedded import resolve_database_url
from dispatcher.settings import Settings

Handler = Callable[[argparse.Namespace, Settings], Coroutine[Any, Any, int]]


def row_id(text: str) -> int:
    """An id argument (endpoint, delivery, ops webhook): a bigint, said in
    one line (exit 2) rather than found out of range by the database."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an id: {text!r}") from None
    if not 0 < value < 2**63:
        raise argparse.ArgumentTypeError(f"not an id: {text} (ids are 1 to 2^63-1)")
    return value


def emit(args: argparse.Namespace, doc: Any, human: Callable[[], None]) -> None:
    if getattr(args, "json", False):
        sys.stdout.write(to_json(doc).decode() + "\n")
    else:
        human()


async def with_conn(settings: Settings, fn: Callable[[asyncpg.Connection], Awaitable[int]]) -> int:
    url = resolve_database_url(settings.database_url, settings.home)
    conn = await db.connect(url)
    try:
        await db.require_schema(conn)
        return await fn(conn)
    finally:
        await conn.close()


def report(
    args: argparse.Namespace,
    settings: Settings,
    fetch: Callable[[asyncpg.Connection], Awaitable[Any]],
    human: Callable[[Any], None],
    *,
    note: Callable[[Any], None] | None = None,
) -> Coroutine[Any, Any, int]:
    """Runs one operation and prints its result: JSON, or `human(result)`.
    `note(result)` may add a line on stderr, with or without --json."""

    async def go(conn: asyncpg.Connection) -> int:
        doc = await fetch(conn)
        if note is not None:
            note(doc)
        emit(args, doc, lambda: human(doc))
        return 0

    return with_conn(settings, go)


def table(cols: Sequence[str]) -> Callable[[Any], None]:
    return lambda rows: print_table(rows, cols)
