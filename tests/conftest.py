"""Shared fixtures: a real PostgreSQL, a fresh database per test, and real
HTTP receivers on 127.0.0.1.

The server is DATABASE_URL's when set (CI), otherwise an embedded pgserver
in a temporary folder. Each test gets a database cloned from a migrated
template, and it is dropped afterwards.
"""

from __future__ import annotations

import asyncio
import os
import tempfile
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import asyncpg
import pytest
from hypothesis import settings

from dispatcher import db
from dispatcher.db.embedded import with_database
from tests.receivers import Receiver

# Environment the tests must not inherit from the developer's shell.
for _name in [k for k in os.environ if k.startswith("DISPATCHER_")]:
    os.environ.pop(_name)

REPO = Path(__file__).resolve().parent.parent

# Examples are judged by what they find, not by how fast a shared 2-core
# machine runs them: a per-example deadline only turned load into failures.
settings.register_profile("dispatcher", deadline=None)
settings.load_profile("dispatcher")


@pytest.fixture(scope="session")
def server_url() -> Iterator[str]:
    url = os.environ.get("DATABASE_URL")
    if url:
        yield url
        return
    from dispatcher.db.embedded import embedded_url

    home = Path(tempfile.mkdtemp(prefix="dispatcher-test-"))
    url = embedded_url(home)
    yield url
    import subprocess

    pg_ctl = Path(__import__("pgserver").__file__).parent / "pginstall" / "bin" / "pg_ctl"
    subprocess.run(
        ["su", "pgserver", "-s", "/bin/sh", "-c", f"{pg_ctl} -D {home / 'pgdata'} stop -m fast"]
        if os.geteuid() == 0
        else [str(pg_ctl), "-D", str(home / "pgdata"), "stop", "-m", "fast"],
        capture_output=True,
        check=False,
    )


async def _admin(url: str, *sql: str) -> None:
    conn = await asyncpg.connect(url)
    try:
        for s in sql:
            await conn.execute(s)
    finally:
        await conn.close()


@pytest.fixture(scope="session")
def template_db(server_url: str) -> Iterator[str]:
    name = f"dispatcher_tpl_{os.getpid()}"

    async def setup() -> None:
        await _admin(server_url, f"DROP DATABASE IF EXISTS {name}", f"CREATE DATABASE {name}")
        conn = await asyncpg.connect(with_database(server_url, name))
        try:
            await db.migrate(conn)
        finally:
            await conn.close()

    asyncio.run(setup())
    yield name
    asyncio.run(_admin(server_url, f"DROP DATABASE IF EXISTS {name} WITH (FORCE)"))


@pytest.fixture
def db_url(server_url: str, template_db: str) -> Iterator[str]:
    name = f"dispatcher_t_{uuid.uuid4().hex[:12]}"
    asyncio.run(_admin(server_url, f"CREATE DATABASE {name} TEMPLATE {template_db}"))
    yield with_database(server_url, name)
    asyncio.run(_admin(server_url, f"DROP DATABASE IF EXISTS {name} WITH (FORCE)"))


@pytest.fixture
def empty_db_url(server_url: str) -> Iterator[str]:
    name = f"dispatcher_e_{uuid.uuid4().hex[:12]}"
    asyncio.run(_admin(server_url, f"CREATE DATABASE {name}"))
    yield with_database(server_url, name)
    asyncio.run(_admin(server_url, f"DROP DATABASE IF EXISTS {name} WITH (FORCE)"))


@pytest.fixture
async def conn(db_url: str) -> AsyncIterator[asyncpg.Connection]:
    c = await asyncpg.connect(db_url)
    yield c
    await c.close()


@pytest.fixture
async def receiver() -> AsyncIterator[Receiver]:
    r = await Receiver().start()
    yield r
    await r.stop()
