"""The schema's two kinds of file: numbered migrations (tables and data,
applied once) and the repeatable files of schema/functions/ (functions and
triggers, applied again when their text changes).

A database at every earlier schema version, upgraded, ends with the
schema of a fresh one, catalog entry for entry: the upgrade works, and
folding the functions out of the numbered files lost no table change. An
edited file is applied again and live; stale overloads go; a checksum that
differs means the schema is not current.
"""

from __future__ import annotations

import asyncio
import shutil
import uuid
from collections.abc import Callable, Iterator
from importlib.resources import as_file, files
from pathlib import Path

import asyncpg
import pytest

from dispatcher import db
from dispatcher.db import migrator
from dispatcher.db.embedded import with_database
from tests.releases import archived, build_release

# One line per catalog entry of the current schema: what a database's
# schema is, compared as a set. Columns with their position (COPY and
# SELECT * see the order), defaults, indexes, constraints (with NOT
# VALID), storage options, function definitions and triggers; then what
# the runner recorded and the rows the migrations seed.
FINGERPRINT = """
SELECT format('rel %s %s %s %s', c.relname, c.relkind, c.relpersistence, c.reloptions)
FROM pg_class c WHERE c.relnamespace = current_schema()::regnamespace
UNION ALL
SELECT format('col %s %s %s %s %s %s', c.relname, a.attnum, a.attname,
              format_type(a.atttypid, a.atttypmod), a.attnotnull, pg_get_expr(d.adbin, d.adrelid))
FROM pg_attribute a JOIN pg_class c ON c.oid = a.attrelid
LEFT JOIN pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum
WHERE c.relnamespace = current_schema()::regnamespace AND c.relkind IN ('r', 'p', 'v', 'm')
  AND a.attnum > 0 AND NOT a.attisdropped
UNION ALL
SELECT 'idx ' || indexdef FROM pg_indexes WHERE schemaname = current_schema()
UNION ALL
SELECT format('con %s %s %s', conrelid::regclass, conname, pg_get_constraintdef(oid))
FROM pg_constraint WHERE connamespace = current_schema()::regnamespace
UNION ALL
SELECT format('fn %s %s', p.oid::regprocedure, md5(pg_get_functiondef(p.oid)))
FROM pg_proc p WHERE p.pronamespace = current_schema()::regnamespace AND p.prokind IN ('f', 'p')
UNION ALL
SELECT format('trg %s %s', tgenabled, pg_get_triggerdef(oid)) FROM pg_trigger
WHERE NOT tgisinternal
UNION ALL
SELECT format('view %s %s', c.relname, pg_get_viewdef(c.oid)) FROM pg_class c
WHERE c.relnamespace = current_schema()::regnamespace AND c.relkind IN ('v', 'm')
UNION ALL
SELECT format('migration %s %s', version, name) FROM dispatcher_migrations
UNION ALL
SELECT format('repeatable %s %s', name, checksum) FROM dispatcher_repeatables
UNION ALL
SELECT format('application %s %s', id, name) FROM applications
UNION ALL
SELECT format('settings %s', wake) FROM dispatcher_settings
"""


async def fingerprint(conn: asyncpg.Connection) -> set[str]:
    return {r[0] for r in await conn.fetch(FINGERPRINT)}


def _differences(want: set[str], got: set[str]) -> dict[str, list[str]]:
    return {"missing": sorted(want - got), "extra": sorted(got - want)}


@pytest.fixture(scope="module")
def fresh(server_url: str) -> set[str]:
    """The fingerprint of a database migrated from nothing."""
    name = f"dispatcher_fresh_{uuid.uuid4().hex[:12]}"

    async def build() -> set[str]:
        admin = await asyncpg.connect(server_url)
        try:
            await admin.execute(f"CREATE DATABASE {name}")
            try:
                conn = await asyncpg.connect(with_database(server_url, name))
                try:
                    await db.migrate(conn)
                    return await fingerprint(conn)
                finally:
                    await conn.close()
            finally:
                await admin.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
        finally:
            await admin.close()

    return asyncio.run(build())


@pytest.mark.parametrize("version", [m[0] for m in archived()])
async def test_every_earlier_version_upgrades_to_the_fresh_schema(
    fresh: set[str], empty_db_url: str, version: int
) -> None:
    conn = await asyncpg.connect(empty_db_url)
    try:
        await build_release(conn, version)
        applied = await db.migrate(conn)
        later = [name for v, name, _ in db.migrations() if v > version]
        functions = [db.REPEATABLE_PREFIX + name for name, _ in db.repeatables()]
        assert applied == later + functions
        assert _differences(fresh, await fingerprint(conn)) == {"missing": [], "extra": []}
        assert await db.migrations_current(conn)
        assert await db.migrate(conn) == []
    finally:
        await conn.close()


# ------------------------------------------------------- edited repeatable files


@pytest.fixture
def functions_copy(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A copy of schema/functions/ that the runner reads instead, to edit."""
    folder = tmp_path / "functions"
    with as_file(files("dispatcher.schema").joinpath("functions")) as shipped:
        shutil.copytree(shipped, folder)
    package: Callable[..., list[tuple[str, str]]] = db.repeatables
    # The runner's own name for it (db/migrator.py; db re-exports it).
    monkeypatch.setattr(migrator, "repeatables", lambda: package(folder))
    yield folder


def _edit(path: Path, old: str, new: str) -> None:
    text = path.read_text()
    assert old in text
    path.write_text(text.replace(old, new))


ISO = "SELECT dispatcher_iso('2024-01-02 03:04:05.678+00')"


async def test_an_edited_file_is_applied_again_and_live(
    empty_db_url: str, functions_copy: Path
) -> None:
    conn = await asyncpg.connect(empty_db_url)
    try:
        await db.migrate(conn)
        assert await conn.fetchval(ISO) == "2024-01-02T03:04:05.678Z"
        assert await db.migrate(conn) == []  # nothing changed: nothing applied

        _edit(functions_copy / "ops_webhooks.sql", '"T"HH24:MI:SS.MS"Z"', '"T"HH24:MI"Z"')
        assert not await db.migrations_current(conn)
        # Every file goes again, in one transaction: the stale-overload check
        # needs to see every definition.
        assert await db.migrate(conn) == [
            db.REPEATABLE_PREFIX + name for name, _ in db.repeatables()
        ]
        assert await conn.fetchval(ISO) == "2024-01-02T03:04Z"
        assert await db.migrations_current(conn)
        assert await db.migrate(conn) == []
    finally:
        await conn.close()


async def test_a_database_a_later_release_migrated_keeps_its_functions(
    empty_db_url: str, functions_copy: Path
) -> None:
    """This release's files, edited here, stand for an older release's: its
    `dispatcher migrate`, run late (a pod restarting during a rollout),
    must not take back the functions the later release's code calls."""
    conn = await asyncpg.connect(empty_db_url)
    try:
        await db.migrate(conn)
        await conn.execute("INSERT INTO dispatcher_migrations VALUES (999, '999_later.sql')")
        _edit(functions_copy / "ops_webhooks.sql", '"T"HH24:MI:SS.MS"Z"', '"T"HH24:MI"Z"')
        assert await db.migrate(conn) == []
        assert await conn.fetchval(ISO) == "2024-01-02T03:04:05.678Z"
        assert await db.migrations_current(conn)
    finally:
        await conn.close()


async def test_a_file_that_fails_leaves_everything_as_it_was(
    empty_db_url: str, functions_copy: Path
) -> None:
    conn = await asyncpg.connect(empty_db_url)
    try:
        await db.migrate(conn)
        _edit(functions_copy / "ops_webhooks.sql", '"T"HH24:MI:SS.MS"Z"', '"T"HH24:MI"Z"')
        (functions_copy / "zz_broken.sql").write_text(
            "CREATE OR REPLACE FUNCTION dispatcher_broken() RETURNS int"
            " LANGUAGE sql AS $$ SELECT no_such_column FROM endpoints $$;\n"
        )
        with pytest.raises(asyncpg.UndefinedColumnError):
            await db.migrate(conn)
        assert await conn.fetchval(ISO) == "2024-01-02T03:04:05.678Z"
        assert not await db.migrations_current(conn)
        (functions_copy / "zz_broken.sql").unlink()
        assert await db.migrate(conn) != []
        assert await conn.fetchval(ISO) == "2024-01-02T03:04Z"
    finally:
        await conn.close()


async def signatures(conn: asyncpg.Connection, name: str) -> list[str]:
    rows = await conn.fetch(
        "SELECT p.oid::regprocedure::text FROM pg_proc p"
        " WHERE p.proname = $1 AND p.pronamespace = current_schema()::regnamespace ORDER BY 1",
        name,
    )
    return [r[0] for r in rows]


@pytest.mark.parametrize("in_a_transaction", [False, True])
async def test_overloads_the_files_no_longer_define_are_dropped(
    empty_db_url: str, functions_copy: Path, in_a_transaction: bool
) -> None:
    """In a caller's transaction too, where the runner's own transactions
    are savepoints and a row's xmin is a subtransaction's id."""
    conn = await asyncpg.connect(empty_db_url)
    probe = functions_copy / "zz_probe.sql"
    try:
        probe.write_text(
            "CREATE OR REPLACE FUNCTION dispatcher_probe(a int) RETURNS int"
            " LANGUAGE sql AS $$ SELECT a $$;\n"
            "CREATE OR REPLACE FUNCTION dispatcher_probe(a text) RETURNS text"
            " LANGUAGE sql AS $$ SELECT a $$;\n"
        )
        await db.migrate(conn)
        assert await signatures(conn, "dispatcher_probe") == [
            "dispatcher_probe(integer)",
            "dispatcher_probe(text)",
        ]
        # Someone's own function of another name is not the files' to drop.
        await conn.execute("CREATE FUNCTION dispatcher_mine(a int) RETURNS int"
                           " LANGUAGE sql AS $$ SELECT a $$")  # fmt: skip

        probe.write_text(
            "CREATE OR REPLACE FUNCTION dispatcher_probe(a int, b int) RETURNS int"
            " LANGUAGE sql AS $$ SELECT a + b $$;\n"
        )
        if in_a_transaction:
            async with conn.transaction():
                await db.migrate(conn)
        else:
            await db.migrate(conn)
        assert await signatures(conn, "dispatcher_probe") == ["dispatcher_probe(integer,integer)"]
        assert await conn.fetchval("SELECT dispatcher_probe(1, 2)") == 3
        assert len(await signatures(conn, "dispatcher_mine")) == 1
        # What the files still define is all there.
        assert len(await signatures(conn, "dispatcher_enqueue")) == 3
        # json, and the text and jsonb forms that land in it
        assert len(await signatures(conn, "dispatcher_enqueue_app")) == 3
    finally:
        await conn.close()


@pytest.mark.parametrize(
    ("version", "name", "then", "now"),
    [
        (11, "dispatcher_enqueue_app", "(text,text,json,text,bigint)",
         "(text,text,json,text,bigint,text[],timestamp with time zone,boolean,text,text,"
             "bigint,timestamp with time zone)"),
        (17, "dispatcher_cancel_event", "(text,text)", "(text,text,boolean)"),
    ],
)  # fmt: skip
async def test_the_signatures_earlier_versions_had_are_gone(
    empty_db_url: str, version: int, name: str, then: str, now: str
) -> None:
    """Schema 012, 013 and 018 dropped the old form of the function they
    gave a new signature; the runner does that now, for every version."""
    conn = await asyncpg.connect(empty_db_url)
    try:
        await build_release(conn, version)
        assert await signatures(conn, name) == [name + then]
        await db.migrate(conn)
        sigs = await signatures(conn, name)
        assert name + now in sigs and name + then not in sigs
    finally:
        await conn.close()


async def test_a_checksum_that_differs_means_not_current(empty_db_url: str) -> None:
    conn = await asyncpg.connect(empty_db_url)
    try:
        # As the runner before schema/functions/ left a database: every
        # numbered migration applied, no checksums recorded.
        await build_release(conn, db.migrations()[-1][0])
        assert not await db.migrations_current(conn)
        assert await db.migrate(conn) == [
            db.REPEATABLE_PREFIX + name for name, _ in db.repeatables()
        ]
        assert await db.migrations_current(conn)

        await conn.execute(
            "UPDATE dispatcher_repeatables SET checksum = 'edited' WHERE name = 'queue.sql'"
        )
        assert not await db.migrations_current(conn)
        await db.migrate(conn)
        assert await db.migrations_current(conn)

        await conn.execute("DELETE FROM dispatcher_repeatables WHERE name = 'triggers.sql'")
        assert not await db.migrations_current(conn)
        await db.migrate(conn)
        # A file a later release added, unknown here, does not count.
        await conn.execute(
            "INSERT INTO dispatcher_repeatables (name, checksum) VALUES ('later.sql', 'x')"
        )
        assert await db.migrations_current(conn)
    finally:
        await conn.close()
