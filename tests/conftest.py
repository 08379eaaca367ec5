"""Shared fixtures: a real PostgreSQL, a database of its own per test, and
real HTTP receivers on 127.0.0.1.

The server is DATABASE_URL's when set, otherwise one embedded pgserver for
the whole run (shared by pytest-xdist's workers) in a temporary folder that
is removed at the end, with everything else the run left there.

Each worker migrates a template database once. A test that asks for
`db_url` gets a database cloned from it; afterwards, when the test left the
schema as it found it, the database is truncated back to the template's
rows and handed (under a new name) to a later test, otherwise dropped.
`empty_db_url` is a new, unmigrated database, always dropped.

tests/unit needs none of this: asking it for a database fails the test
(`make test-fast` runs that lane alone, without PostgreSQL).
"""

from __future__ import annotations

import asyncio
import atexit
import fcntl
import io
import os
import shutil
import tempfile
import uuid
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import asyncpg
import pytest
from hypothesis import settings

from dispatcher import db
from dispatcher.db import embedded
from dispatcher.db.embedded import with_database
from tests.receivers import Receiver

# Environment the tests must not inherit from the developer's shell.
for _name in [k for k in os.environ if k.startswith("DISPATCHER_")]:
    os.environ.pop(_name)

REPO = Path(__file__).resolve().parent.parent
UNIT = REPO / "tests" / "unit"

# Examples are judged by what they find, not by how fast a shared 2-core
# machine runs them: a per-example deadline only turned load into failures.
settings.register_profile("dispatcher", deadline=None)
settings.load_profile("dispatcher")

_HOME = "dispatcher_test_home"  # xdist's workerinput key


# -- The run's temporary folder: made by the controller, removed by it --------


@pytest.hookimpl(tryfirst=True)  # before pytest reads --basetemp
def pytest_configure(config: pytest.Config) -> None:
    workerinput = getattr(config, "workerinput", None)
    if workerinput is not None:  # an xdist worker: its controller made the folder
        config._dispatcher_home = Path(workerinput[_HOME])  # type: ignore[attr-defined]
        return
    home = Path(tempfile.mkdtemp(prefix="dispatcher-test-"))
    config._dispatcher_home = home  # type: ignore[attr-defined]
    # Removed last of all: pgserver's own exit handler still writes there.
    atexit.register(shutil.rmtree, home, ignore_errors=True)
    # tmp_path folders go there too (an explicit --basetemp keeps them), and
    # so does what the commands a test starts leave in $TMPDIR (Chromium's
    # profiles, pgserver's sockets).
    if config.option.basetemp is None:
        config.option.basetemp = str(home / "basetemp")
    (home / "tmp").mkdir()
    os.environ["TMPDIR"] = str(home / "tmp")
    # A command a test starts without DATABASE_URL or DISPATCHER_HOME would
    # start the user's own embedded database (DISPATCHER_HOME's default, in
    # the user's data folder): it gets one in this folder instead.
    os.environ["XDG_DATA_HOME"] = str(home / "data")
    # pgserver keeps its lock in the XDG runtime folder, else /tmp/runtime-$UID.
    if not os.environ.get("XDG_RUNTIME_DIR"):
        (home / "run").mkdir(mode=0o700)
        os.environ["XDG_RUNTIME_DIR"] = str(home / "run")


@pytest.hookimpl(optionalhook=True)
def pytest_configure_node(node: object) -> None:
    """xdist: each worker is told the controller's folder."""
    config = node.config  # type: ignore[attr-defined]
    node.workerinput[_HOME] = str(config._dispatcher_home)  # type: ignore[attr-defined]


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    """The run's last words on what it skipped, grouped by reason, and the
    command that installs what those tests need (tests/skips.py)."""
    from tests import skips

    reports = terminalreporter.stats.get("skipped", [])
    lines = skips.summary(
        [skips.reason_of(r.longrepr) for r in reports],
        root=hasattr(os, "geteuid") and os.geteuid() == 0,
    )
    if lines:
        terminalreporter.write_sep("=", "skipped, and why")
        for line in lines:
            terminalreporter.write_line(line)


def pytest_unconfigure(config: pytest.Config) -> None:
    """The controller stops the embedded server (its folder goes at exit)."""
    home: Path | None = getattr(config, "_dispatcher_home", None)
    if hasattr(config, "workerinput") or home is None:
        return
    if (embedded.data_dir(home) / "postmaster.pid").exists():
        try:
            embedded.stop(home)
        except Exception as exc:
            print(f"\nthe tests' embedded PostgreSQL did not stop: {exc}")


# -- The server, the template, the databases ----------------------------------


@pytest.fixture(scope="session")
def server_url(request: pytest.FixtureRequest) -> str:
    url = os.environ.get("DATABASE_URL")
    if url:
        return url
    # Every xdist worker asks: the first starts it, the others wait for it
    # here (pgserver reads a half-written postmaster.pid as a failure).
    home: Path = request.config._dispatcher_home  # type: ignore[attr-defined]
    with open(home / "server.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        url = embedded.embedded_url(home)
        asyncio.run(_throwaway(url))
        return url


async def _throwaway(url: str) -> None:
    """The run's own server holds nothing worth an fsync: it is removed at
    the end, and a test that kills PostgreSQL kills the server, not the
    machine, so the OS still has every write. Syncing is most of what the
    suite's many small databases, truncations and commits cost the disk."""
    conn = await db.connect_any(url, timeout=60)
    try:
        if await conn.fetchval("SHOW fsync") == "on":
            for name in ("fsync", "synchronous_commit", "full_page_writes"):
                await conn.execute(f"ALTER SYSTEM SET {name} = off")
            await conn.execute("SELECT pg_reload_conf()")
    finally:
        await conn.close()


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    """Before any fixture starts a server: tests/unit gets no database."""
    if item.path.is_relative_to(UNIT):
        wanted = {"server_url", "template_db", "databases", "db_url", "empty_db_url", "conn"}
        wanted &= set(getattr(item, "fixturenames", ()))
        if wanted:
            pytest.fail(f"tests/unit runs without PostgreSQL; this test asks for {sorted(wanted)}")


async def _admin(url: str, *sql: str) -> None:
    conn = await db.connect_any(url, timeout=60)
    try:
        for s in sql:
            await conn.execute(s)
    finally:
        await conn.close()


# What a test may change in its database's schema: when any of it differs
# afterwards, the database is dropped rather than reused.
_SCHEMA = """
SELECT md5(string_agg(x, E'\\n' ORDER BY x)) FROM (
  SELECT 'ns ' || nspname AS x FROM pg_namespace
  UNION ALL
  SELECT format('rel %s %s %s %s %s %s', c.oid::regclass, c.relkind, c.relpersistence,
                c.reloptions, c.relrowsecurity, c.relacl)
  FROM pg_class c WHERE c.relnamespace NOT IN
      ('pg_catalog'::regnamespace, 'information_schema'::regnamespace, 'pg_toast'::regnamespace)
  UNION ALL
  SELECT format('att %s %s %s %s %s', a.attrelid::regclass, a.attname,
                format_type(a.atttypid, a.atttypmod), a.attnotnull,
                pg_get_expr(d.adbin, d.adrelid))
  FROM pg_attribute a JOIN pg_class c ON c.oid = a.attrelid
  LEFT JOIN pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum
  WHERE c.relnamespace NOT IN
      ('pg_catalog'::regnamespace, 'information_schema'::regnamespace, 'pg_toast'::regnamespace)
    AND a.attnum > 0 AND NOT a.attisdropped
  UNION ALL
  SELECT format('con %s %s %s', conrelid::regclass, conname, pg_get_constraintdef(oid))
  FROM pg_constraint WHERE connamespace NOT IN
      ('pg_catalog'::regnamespace, 'information_schema'::regnamespace)
  UNION ALL
  SELECT format('idx %s', pg_get_indexdef(indexrelid)) FROM pg_index i
  JOIN pg_class c ON c.oid = i.indexrelid WHERE c.relnamespace NOT IN
      ('pg_catalog'::regnamespace, 'information_schema'::regnamespace, 'pg_toast'::regnamespace)
  UNION ALL
  SELECT format('trg %s %s', tgenabled, pg_get_triggerdef(oid)) FROM pg_trigger
  WHERE NOT tgisinternal
  UNION ALL
  SELECT format('fn %s %s %s', p.oid::regprocedure, md5(p.prosrc), p.proconfig) FROM pg_proc p
  WHERE p.pronamespace NOT IN ('pg_catalog'::regnamespace, 'information_schema'::regnamespace)
  UNION ALL
  SELECT format('pol %s %s %s', polrelid::regclass, polname, pg_get_expr(polqual, polrelid))
  FROM pg_policy
  UNION ALL
  SELECT format('type %s %s', t.oid::regtype, t.typtype) FROM pg_type t
  WHERE t.typnamespace NOT IN ('pg_catalog'::regnamespace, 'information_schema'::regnamespace,
                               'pg_toast'::regnamespace)
  UNION ALL
  SELECT format('enum %s %s %s', enumtypid::regtype, enumsortorder, enumlabel) FROM pg_enum
  UNION ALL
  SELECT format('view %s %s', c.oid::regclass, pg_get_viewdef(c.oid)) FROM pg_class c
  WHERE c.relkind IN ('v', 'm') AND c.relnamespace NOT IN
      ('pg_catalog'::regnamespace, 'information_schema'::regnamespace)
  UNION ALL
  SELECT 'ext ' || extname || ' ' || extversion FROM pg_extension
  UNION ALL
  SELECT format('set %s', setconfig) FROM pg_db_role_setting s JOIN pg_database d
      ON d.oid = s.setdatabase WHERE d.datname = current_database()
  UNION ALL
  SELECT 'lo ' || count(*) FROM pg_largeobject_metadata
) parts
"""

_TABLES = """
SELECT n.nspname AS schema, c.relname AS name,
       array_agg(a.attname::text ORDER BY a.attnum)
           FILTER (WHERE a.attgenerated = '') AS columns
FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
JOIN pg_attribute a ON a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped
WHERE c.relkind IN ('r', 'p')
  AND n.nspname NOT IN ('pg_catalog', 'information_schema', 'pg_toast')
GROUP BY n.nspname, c.relname
"""

# Which tables reference which by foreign key: truncating a table must take
# those that point at it along. (A partition needs no entry: a leaf holding
# a row makes its parent hold one too, so both are truncated.)
_REFERENCES = """
SELECT rn.nspname AS rschema, r.relname AS rname, tn.nspname AS tschema, t.relname AS tname
FROM pg_constraint c
JOIN pg_class r ON r.oid = c.conrelid JOIN pg_namespace rn ON rn.oid = r.relnamespace
JOIN pg_class t ON t.oid = c.confrelid JOIN pg_namespace tn ON tn.oid = t.relnamespace
WHERE c.contype = 'f'
"""

_SEQUENCES = """
SELECT format('%I.%I', schemaname, sequencename) AS name, last_value, start_value
FROM pg_sequences
"""


def _qualified(schema: str, name: str) -> str:
    return ".".join('"' + part.replace('"', '""') + '"' for part in (schema, name))


@dataclass
class Databases:
    """One worker's test databases, cloned from its template and reused."""

    server_url: str
    template: str
    free: list[str] = field(default_factory=list)
    schema: str = ""
    tables: list[tuple[str, str, list[str]]] = field(default_factory=list)  # schema, name, columns
    rows: dict[tuple[str, str], bytes] = field(default_factory=dict)  # the template's
    sequences: list[tuple[str, int | None, int]] = field(default_factory=list)
    referencing: dict[str, set[str]] = field(default_factory=dict)  # table -> who points at it
    any_rows: str = ""  # one query: the index of every table holding a row
    cloned: int = 0
    reused: int = 0

    async def snapshot(self) -> None:
        """What a reused database is put back to: the template as migrated."""
        conn = await db.connect_any(with_database(self.server_url, self.template), timeout=60)
        try:
            self.schema = await conn.fetchval(_SCHEMA)
            self.tables = [
                (r["schema"], r["name"], list(r["columns"])) for r in await conn.fetch(_TABLES)
            ]
            for schema, table, columns in self.tables:
                if await conn.fetchval(f"SELECT EXISTS (SELECT FROM {_qualified(schema, table)})"):
                    out = io.BytesIO()
                    await conn.copy_from_table(
                        table, schema_name=schema, columns=columns, output=out, format="binary"
                    )
                    self.rows[schema, table] = out.getvalue()
            self.sequences = [tuple(r) for r in await conn.fetch(_SEQUENCES)]  # type: ignore[misc]
            for r in await conn.fetch(_REFERENCES):
                referenced = _qualified(r["tschema"], r["tname"])
                self.referencing.setdefault(referenced, set()).add(
                    _qualified(r["rschema"], r["rname"])
                )
            self.any_rows = " UNION ALL ".join(
                f"SELECT {i} WHERE EXISTS (SELECT FROM {_qualified(sch, t)})"
                for i, (sch, t, _) in enumerate(self.tables)
            )
        finally:
            await conn.close()

    async def take(self) -> str:
        name = f"dispatcher_t_{uuid.uuid4().hex[:12]}"
        while self.free:
            # A new name each time: a process a previous test leaked cannot
            # find its way into this one's database.
            try:
                await _admin(self.server_url, f"ALTER DATABASE {self.free.pop()} RENAME TO {name}")
            except asyncpg.PostgresError:
                continue  # someone connected to it meanwhile: left for the session's end
            self.reused += 1
            return name
        await _admin(self.server_url, f"CREATE DATABASE {name} TEMPLATE {self.template}")
        self.cloned += 1
        return name

    async def give_back(self, name: str) -> None:
        try:
            if await self._reset(name):
                self.free.append(name)
                return
        except (OSError, asyncpg.PostgresError):
            pass
        await _admin(self.server_url, f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")

    async def _reset(self, name: str) -> bool:
        """Back to the template's rows; False when the schema was changed."""
        admin = await db.connect_any(self.server_url, timeout=60)
        try:
            await admin.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
                " WHERE datname = $1 AND pid <> pg_backend_pid()",
                name,
            )
        finally:
            await admin.close()
        conn = await db.connect_any(with_database(self.server_url, name), timeout=60)
        try:
            if await conn.fetchval(_SCHEMA) != self.schema:
                return False
            await conn.execute("SET lock_timeout = '10s'")
            async with conn.transaction():
                # The template's rows go back as they were: no trigger fires.
                await conn.execute("SET LOCAL session_replication_role = replica")
                # Only what holds rows now or held them in the template (a
                # test touches a few of the tables): a TRUNCATE makes new
                # files for every table and index it names, which was most
                # of the suite's PostgreSQL time when it named them all.
                held = {i for (i,) in await conn.fetch(self.any_rows)}
                wanted = {
                    _qualified(sch, t)
                    for i, (sch, t, _) in enumerate(self.tables)
                    if i in held or (sch, t) in self.rows
                }
                todo = list(wanted)
                while todo:
                    for other in self.referencing.get(todo.pop(), ()):
                        if other not in wanted:
                            wanted.add(other)
                            todo.append(other)
                if wanted:
                    await conn.execute(f"TRUNCATE {', '.join(sorted(wanted))} CASCADE")
                for schema, table, columns in self.tables:
                    if (schema, table) in self.rows:  # always in `wanted`
                        await conn.copy_to_table(
                            table, schema_name=schema, columns=columns, format="binary",
                            source=io.BytesIO(self.rows[schema, table]),
                        )  # fmt: skip
                for seq, last, start in self.sequences:
                    if last is None:
                        await conn.execute("SELECT setval($1, $2, false)", seq, start)
                    else:
                        await conn.execute("SELECT setval($1, $2, true)", seq, last)
            # Counters a test reads (dead rows, vacuums) start from zero again.
            await conn.execute("SELECT pg_stat_reset()")
            return True
        finally:
            await conn.close()

    async def drop_all(self) -> None:
        for name in self.free:
            await _admin(self.server_url, f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
        self.free.clear()


@pytest.fixture(scope="session")
def template_db(server_url: str) -> Iterator[str]:
    name = f"dispatcher_tpl_{os.getpid()}"  # one per worker process

    async def setup() -> None:
        await _admin(server_url, f"DROP DATABASE IF EXISTS {name}", f"CREATE DATABASE {name}")
        conn = await db.connect_any(with_database(server_url, name), timeout=60)
        try:
            await db.migrate(conn)
        finally:
            await conn.close()

    asyncio.run(setup())
    yield name
    asyncio.run(_admin(server_url, f"DROP DATABASE IF EXISTS {name} WITH (FORCE)"))


@pytest.fixture(scope="session")
def databases(server_url: str, template_db: str) -> Iterator[Databases]:
    pool = Databases(server_url, template_db)
    asyncio.run(pool.snapshot())
    yield pool
    asyncio.run(pool.drop_all())


@pytest.fixture
def db_url(databases: Databases) -> Iterator[str]:
    name = asyncio.run(databases.take())
    yield with_database(databases.server_url, name)
    asyncio.run(databases.give_back(name))


@pytest.fixture
def empty_db_url(server_url: str) -> Iterator[str]:
    name = f"dispatcher_e_{uuid.uuid4().hex[:12]}"
    asyncio.run(_admin(server_url, f"CREATE DATABASE {name}"))
    yield with_database(server_url, name)
    asyncio.run(_admin(server_url, f"DROP DATABASE IF EXISTS {name} WITH (FORCE)"))


@pytest.fixture
async def conn(db_url: str) -> AsyncIterator[asyncpg.Connection]:
    c = await db.connect_any(db_url, timeout=60)
    yield c
    await c.close()


@pytest.fixture
async def receiver() -> AsyncIterator[Receiver]:
    r = await Receiver().start()
    yield r
    await r.stop()
