"""`dispatcher db status|url|stop`: the embedded PostgreSQL, seen from the CLI.

An entry point like the rest of the CLI (dispatcher.cli.main.main parses the flags).
With DATABASE_URL set there is no embedded server: `status` says so (and
whether that database answers), `url` prints it with its password masked,
and `stop` has nothing to stop (exit 0). No URL's password is ever printed.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from dispatcher import db
from dispatcher.core.encoding import to_json
from dispatcher.core.errors import OperationalError
from dispatcher.db import embedded
from dispatcher.settings import Settings


def _print(args: argparse.Namespace, doc: Any, line: str) -> None:
    sys.stdout.write((to_json(doc).decode() if args.json else line) + "\n")


async def _reachable(url: str) -> bool:
    try:
        conn = await db.connect(url)
    except OperationalError:
        return False
    await conn.close()
    return True


async def db_status(settings: Settings) -> dict[str, Any]:
    if settings.database_url:
        return {
            "embedded": False,
            "running": await _reachable(settings.database_url),
            "url": embedded.redact(settings.database_url),
            "data_dir": None,
        }
    url = embedded.running_url(settings.home)
    return {
        "embedded": True,
        "running": url is not None,
        "url": None if url is None else embedded.redact(url),
        "data_dir": str(embedded.data_dir(settings.home)),
    }


async def cmd_db_status(args: argparse.Namespace, settings: Settings) -> int:
    doc = await db_status(settings)
    if not doc["embedded"]:
        state = "reachable" if doc["running"] else "not reachable"
        line = f"DATABASE_URL is set ({doc['url']}, {state}): no embedded PostgreSQL in use"
    elif doc["running"]:
        line = f"embedded PostgreSQL running, data in {doc['data_dir']}\nurl {doc['url']}"
    else:
        line = f"embedded PostgreSQL not running (data in {doc['data_dir']})"
    _print(args, doc, line)
    return 0


async def cmd_db_url(args: argparse.Namespace, settings: Settings) -> int:
    """The URL to connect with (psql, a producer): the embedded server's,
    started if need be, or DATABASE_URL's with its password masked."""
    url = embedded.redact(embedded.resolve_database_url(settings.database_url, settings.home))
    _print(args, {"url": url, "embedded": not settings.database_url}, url)
    return 0


async def cmd_db_stop(args: argparse.Namespace, settings: Settings) -> int:
    if settings.database_url:
        doc: dict[str, Any] = {"stopped": False, "embedded": False, "data_dir": None}
        _print(args, doc, "DATABASE_URL is set: there is no embedded PostgreSQL to stop")
        return 0
    pgdata = str(embedded.data_dir(settings.home))
    stopped = embedded.stop(settings.home)
    doc = {"stopped": stopped, "embedded": True, "data_dir": pgdata}
    line = (
        f"stopped the embedded PostgreSQL (data in {pgdata})"
        if stopped
        else f"the embedded PostgreSQL is not running (data in {pgdata})"
    )
    _print(args, doc, line)
    return 0
