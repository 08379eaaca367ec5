"""The migration runner: numbered migrations (tables and data, each applied
once, in order, under an advisory lock) and the repeatable files of
schema/functions/ (functions and triggers, applied again whenever their
text changes, stale overloads dropped), and whether a database is current.

Part of the data-access layer (dispatcher.db re-exports its names).
"""

from __future__ import annotations

import hashlib
import importlib.resources
import re
from collections.abc import Awaitable, Callable
from importlib.resources.abc import Traversable
from pathlib import Path

import asyncpg

from dispatcher.core.errors import BadInput, OperationalError
from dispatcher.core.retention import Retention, partition_width_s, partitions_ahead
from dispatcher.core.shaping import compile_success_body
from dispatcher.db.base import MIGRATION_LOCK, Conn

_MIGRATION_NAME = re.compile(r"^(\d{3})_[a-z0-9_]+\.sql$")
_REPEATABLE_NAME = re.compile(r"^[a-z0-9_]+\.sql$")
# How applied repeatable files are named in what migrate() returns.
REPEATABLE_PREFIX = "functions/"


def migrations() -> list[tuple[int, str, str]]:
    found = []
    for entry in importlib.resources.files("dispatcher.schema").iterdir():
        m = _MIGRATION_NAME.match(entry.name)
        if m:
            found.append((int(m.group(1)), entry.name, entry.read_text()))
    if not found:  # pragma: no cover - a broken install
        raise OperationalError(f"no migrations found in {Path(__file__).parent / 'schema'}")
    return sorted(found)


def repeatables(folder: Traversable | None = None) -> list[tuple[str, str]]:
    """The repeatable files, (name, text) in name order: schema/functions/
    unless `folder` names another (the tests' edited copies)."""
    if folder is None:
        folder = importlib.resources.files("dispatcher.schema").joinpath("functions")
    found = [(e.name, e.read_text()) for e in folder.iterdir() if _REPEATABLE_NAME.match(e.name)]
    if not found:  # pragma: no cover - a broken install
        raise OperationalError(f"no function files found in {folder}")
    return sorted(found)


def _checksum(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def has_statements(sql: str) -> bool:
    """More than comments (015 is comments alone): asyncpg fails on those."""
    return bool(re.sub(r"--[^\n]*", "", sql).strip())


async def _set_aside_patterns(conn: Conn) -> None:
    """After 009: success_body patterns are RE2 from now on. An endpoint
    whose pattern RE2 cannot compile (lookaround, backreferences) is
    disabled with the reason, rather than dead-lettering its deliveries:
    its queued rows wait until the pattern is fixed and it is enabled."""
    rows = await conn.fetch(
        "SELECT id, success_body FROM endpoints"
        " WHERE success_body IS NOT NULL AND deleted_at IS NULL"
    )
    for r in rows:
        try:
            compile_success_body(r["success_body"])
        except BadInput:
            await conn.execute(
                "UPDATE endpoints SET enabled = false, disabled_reason = $2, updated_at = now()"
                " WHERE id = $1",
                r["id"],
                UNUSABLE_PATTERN,
            )


# A numbered migration that changes what the functions name (schema 025
# renames the queue's table) says so on a line of its own: the functions
# are applied again inside its transaction, not in the next one.
WITH_FUNCTIONS = "-- migrate: with functions"

UNUSABLE_PATTERN = "success_body is not RE2 syntax: fix it, then enable the endpoint"
# Steps a migration needs that SQL cannot take, run in its transaction.
AFTER: dict[int, Callable[[Conn], Awaitable[None]]] = {9: _set_aside_patterns}

# The schema's functions, each with its row version: CREATE OR REPLACE
# writes a new one (xmin, ctid) even for an unchanged definition. Compared
# before and after, not with pg_current_xact_id(): in a savepoint, xmin is
# the subtransaction's.
_FUNCTION_ROWS = """
SELECT p.oid, p.proname, p.oid::regprocedure::text AS signature, p.xmin::text || p.ctid::text AS v
FROM pg_proc p WHERE p.pronamespace = current_schema()::regnamespace
"""


async def _apply_repeatables(conn: Conn, files: list[tuple[str, str]]) -> None:
    """Runs every repeatable file in one transaction, then drops the stale
    overloads: those of a name the files define, in a form they no longer
    define. A name they stopped defining is a numbered migration's to drop."""
    async with conn.transaction():
        before = {r["oid"]: r["v"] for r in await conn.fetch(_FUNCTION_ROWS)}
        for _, sql in files:
            await conn.execute(sql)
        after = await conn.fetch(_FUNCTION_ROWS)
        touched = {r["proname"] for r in after if before.get(r["oid"]) != r["v"]}
        for r in after:
            if r["proname"] in touched and before.get(r["oid"]) == r["v"]:
                # No CASCADE: what still uses it stops the migration, named.
                await conn.execute(f"DROP FUNCTION {r['signature']}")
        await conn.execute(
            "DELETE FROM dispatcher_repeatables WHERE NOT name = ANY($1::text[])",
            [name for name, _ in files],
        )
        await conn.executemany(
            "INSERT INTO dispatcher_repeatables (name, checksum) VALUES ($1, $2)"
            " ON CONFLICT (name) DO UPDATE"
            " SET checksum = EXCLUDED.checksum, applied_at = now()",
            [(name, _checksum(sql)) for name, sql in files],
        )


async def _stored_checksums(conn: Conn) -> dict[str, str]:
    rows = await conn.fetch("SELECT name, checksum FROM dispatcher_repeatables")
    return {r["name"]: r["checksum"] for r in rows}


def _changed(files: list[tuple[str, str]], stored: dict[str, str]) -> bool:
    return any(stored.get(name) != _checksum(sql) for name, sql in files)


# The time-partitioned tables (dispatcher_day_partitions reads each one's
# time column from its partition key): the attempt log (schema 023), the
# payload store (025), and each final status's history (026).
HISTORY_PARTITIONED = (
    "webhook_history_delivered",
    "webhook_history_dead",
    "webhook_history_cancelled",
)
DAY_PARTITIONED = ("endpoint_latency", "event_payloads", *HISTORY_PARTITIONED)


def partitioned_retention(keep: Retention) -> dict[str, float | None]:
    """Each time-partitioned table's retention (None: kept forever), in
    DAY_PARTITIONED's order."""
    kept = Retention.kept
    return {
        "endpoint_latency": kept(keep.attempts_s),
        "event_payloads": kept(keep.payload_s),
        **dict(zip(HISTORY_PARTITIONED, keep.finals(), strict=True)),
    }


async def migrate(conn: Conn, retention: Retention | None = None) -> list[str]:
    """Applies the pending numbered migrations, each once and in its own
    transaction (those up to the last pending "with functions" one in a
    single transaction, the repeatable files applied at its end); then,
    when one was applied after that or a repeatable file's text changed,
    all the repeatable files again, in one transaction (a table
    change can take with it what depends on it: a dropped table its
    triggers, a DROP ... CASCADE what it reached). Returns what it applied:
    migration names, then the repeatable files as "functions/NAME".
    Several processes may call it at once.

    A database a later release migrated (it has a numbered migration this
    one does not know) keeps its functions: these files are older, and
    would take back what the later code calls. Between two releases with
    the same numbered migrations it cannot tell: it applies its own.

    Then the time-partitioned tables' first partitions, as wide as
    `retention` (the workers' settings; None: the defaults) will have the
    maintenance make them: leaves made a day wide ahead of a ten-minute
    retention would be pruned row by row until those days had passed."""
    applied_now: list[str] = []
    # A session lock, held across the transactions, serialises concurrent
    # migrators; the second one finds everything applied.
    await conn.execute("SELECT pg_advisory_lock($1)", MIGRATION_LOCK)
    try:
        await conn.execute(
            "CREATE TABLE IF NOT EXISTS dispatcher_migrations ("
            " version integer PRIMARY KEY, name text NOT NULL,"
            " applied_at timestamptz NOT NULL DEFAULT now())"
        )
        await conn.execute(
            "CREATE TABLE IF NOT EXISTS dispatcher_repeatables ("
            " name text PRIMARY KEY, checksum text NOT NULL,"
            " applied_at timestamptz NOT NULL DEFAULT now())"
        )
        done = {r["version"] for r in await conn.fetch("SELECT version FROM dispatcher_migrations")}
        pending = [m for m in migrations() if m[0] not in done]
        # Up to the last pending migration that changes what the functions
        # name, one transaction, with the functions applied at its end: an
        # earlier one's functions may name what a later one creates (025's
        # enqueue is 026's), and producers call them between commits.
        marked = [i for i, (_, _, sql) in enumerate(pending) if WITH_FUNCTIONS in sql]
        cut = marked[-1] + 1 if marked and not _ahead(done) else 0
        groups = [pending[:cut]] if cut else []
        groups += [[m] for m in pending[cut:]]
        for i, group in enumerate(groups):
            async with conn.transaction():
                for version, name, sql in group:
                    if has_statements(sql):
                        await conn.execute(sql)
                    if version in AFTER:
                        await AFTER[version](conn)
                    await conn.execute(
                        "INSERT INTO dispatcher_migrations (version, name) VALUES ($1, $2)",
                        version,
                        name,
                    )
                    applied_now.append(name)
                if i == 0 and cut:
                    await _apply_repeatables(conn, repeatables())
        if _ahead(done):
            return applied_now
        files = repeatables()
        # Applied in the grouped transaction, after every migration before
        # it: not again unless one ran after it (each application locks
        # what its triggers and views name, under producers already calling
        # the new code).
        again = len(pending) > cut or _changed(files, await _stored_checksums(conn))
        if again:
            await _apply_repeatables(conn, files)
        if again or cut:
            applied_now += [REPEATABLE_PREFIX + name for name, _ in files]

        # The partitions (schema 023, 025, 026), so a fresh database's first
        # attempts, payloads and final rows land in theirs; maintenance
        # keeps them coming, of the same width.
        for parent, keep_s in partitioned_retention(retention or Retention()).items():
            width = partition_width_s(keep_s)
            await conn.execute(
                "SELECT dispatcher_day_partitions($1, $2, NULL, $3)",
                parent,
                partitions_ahead(width),
                width,
            )
    finally:
        await conn.execute("SELECT pg_advisory_unlock($1)", MIGRATION_LOCK)
    return applied_now


def _ahead(done: set[int]) -> bool:
    """Whether a later release migrated the database."""
    return bool(done - {v for v, _, _ in migrations()})


async def migrations_current(conn: Conn) -> bool:
    """Every numbered migration applied and every repeatable file applied
    as its text is now, unless a later release migrated the database (then
    its functions are the ones to keep, as migrate does). Rows of files
    this release does not have are not asked about."""
    try:
        done = {r["version"] for r in await conn.fetch("SELECT version FROM dispatcher_migrations")}
        stored = await _stored_checksums(conn)
    except asyncpg.UndefinedTableError:
        return False
    if not all(v in done for v, _, _ in migrations()):
        return False
    return _ahead(done) or not _changed(repeatables(), stored)


async def require_schema(conn: Conn) -> None:
    if not await migrations_current(conn):
        raise OperationalError("the database is not migrated: run `dispatcher migrate` first")
