"""Databases as an earlier schema version left them, for tests (and the
migration008 benchmark) of the migrations that follow.

Until schema 019 every migration restated the functions it changed; since
then functions and triggers live in schema/functions/ and the numbered
files hold only table and data changes, so they no longer rebuild an old
version's functions. tests/fixtures/schema-019.tar.gz keeps the files
001-019 as they were before that fold (`git show 7e71294:schema/NNN_*.sql`),
and `build_release(conn, n)` applies them the way the runner of the time
did. Past the archive, the numbered files of schema/ carry on: tables as
version n left them, functions as 019 left them (a version's functions are
in git history, not here; 019's still run on the tables of later versions
unless one drops a column they use).
"""

from __future__ import annotations

import functools
import tarfile
from pathlib import Path

import asyncpg

from dispatcher import db

ARCHIVE = Path(__file__).resolve().parent / "fixtures" / "schema-019.tar.gz"


@functools.cache
def archived() -> tuple[tuple[int, str, str], ...]:
    """(version, name, text) of each archived migration, in order."""
    found = []
    with tarfile.open(ARCHIVE) as tar:
        for member in tar.getmembers():
            name = Path(member.name).name
            if member.isfile() and name.endswith(".sql"):
                data = tar.extractfile(member)
                assert data is not None
                found.append((int(name[:3]), name, data.read().decode()))
    return tuple(sorted(found))


def last_archived() -> int:
    return archived()[-1][0]


async def build_release(conn: asyncpg.Connection, n: int) -> None:
    """The database at schema version n, on an empty database: each
    migration up to n in its own transaction with its dispatcher_migrations
    row (and 009's step after its SQL), as `migrate` applied them then."""
    await conn.execute(
        "CREATE TABLE IF NOT EXISTS dispatcher_migrations ("
        " version integer PRIMARY KEY, name text NOT NULL,"
        " applied_at timestamptz NOT NULL DEFAULT now())"
    )
    later = [m for m in db.migrations() if last_archived() < m[0] <= n]
    for version, name, sql in (*(m for m in archived() if m[0] <= n), *later):
        async with conn.transaction():
            if db.has_statements(sql):
                await conn.execute(sql)
            if version in db.AFTER:
                await db.AFTER[version](conn)
            await conn.execute(
                "INSERT INTO dispatcher_migrations (version, name) VALUES ($1, $2)", version, name
            )
