"""A real streaming standby in front of its primary in DATABASE_URL: what
target_session_attrs does with it, as asyncpg and dispatcher read it.

Built here from the PostgreSQL binaries on PATH (initdb, pg_ctl,
pg_basebackup): a primary on a free port and a standby cloned from it with
`pg_basebackup -R`, both in a temporary folder, both stopped at the end.
Skipped, with the reason, where those binaries are missing or cannot run
(as root they run as the `postgres` user through runuser).

What is true, and held here:
- a hot standby reports `in_hot_standby=on` at start-up (PostgreSQL 14+):
  `read-write` and `primary` both pass over it;
- a primary whose sessions default to read-only
  (`default_transaction_read_only`, here per database) is passed over by
  `read-write` but accepted by `primary`, as libpq does.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from dispatcher import db
from dispatcher.core.errors import OperationalError
from tests.helpers import cli, free_port

BINARIES = ("initdb", "pg_ctl", "pg_basebackup")


def _as_postgres() -> list[str]:
    if os.geteuid() != 0:
        return []
    if shutil.which("runuser") is None:
        pytest.skip("running as root without runuser: initdb refuses root")
    return ["runuser", "-u", "postgres", "--"]


def _run(*argv: str) -> None:
    done = subprocess.run([*_as_postgres(), *argv], capture_output=True, text=True, timeout=120)
    if done.returncode != 0:
        pytest.skip(f"{argv[0]} failed here: {(done.stderr or done.stdout).strip()[:300]}")


@pytest.fixture(scope="module")
def pair() -> Iterator[tuple[int, int]]:
    """(primary port, standby port), both running until the module ends."""
    missing = [b for b in BINARIES if shutil.which(b) is None]
    if missing:
        pytest.skip(f"PostgreSQL binaries not on PATH: {', '.join(missing)}")
    # As root, the servers run as postgres, who cannot enter the test run's
    # own temporary folder (mode 0700): a folder of theirs under /tmp.
    as_root = os.geteuid() == 0
    root = Path(tempfile.mkdtemp(prefix="dispatcher-standby-", dir="/tmp" if as_root else None))
    if as_root:
        shutil.chown(root, "postgres")
    primary, standby = root / "primary", root / "standby"
    ports = free_port(), free_port()
    started: list[Path] = []
    try:
        _run("initdb", "-D", str(primary), "-U", "postgres", "--auth=trust", "--no-sync")
        for data, port in ((primary, ports[0]), (standby, ports[1])):
            if data is standby:
                _run("pg_basebackup", "-h", "127.0.0.1", "-p", str(ports[0]), "-U",
                     "postgres", "-D", str(standby), "-R", "-X", "stream")  # fmt: skip
            opts = f"-p {port} -k {root} -c listen_addresses=127.0.0.1 -c fsync=off"
            _run("pg_ctl", "-D", str(data), "-o", opts, "-l", str(root / f"{port}.log"),
                 "-w", "start")  # fmt: skip
            started.append(data)
        yield ports
    finally:
        for data in reversed(started):
            with contextlib.suppress(Exception):
                subprocess.run([*_as_postgres(), "pg_ctl", "-D", str(data), "-m", "immediate",
                                "-w", "stop"], capture_output=True, timeout=60)  # fmt: skip
        shutil.rmtree(root, ignore_errors=True)


def _url(*ports: int, database: str = "postgres", attrs: str = "read-write") -> str:
    hosts = ",".join(f"127.0.0.1:{p}" for p in ports)
    return f"postgresql://postgres@{hosts}/{database}?target_session_attrs={attrs}"


async def _recovery(url: str) -> tuple[int, bool]:
    conn = await db.connect(url)
    try:
        in_recovery = await conn.fetchval("SELECT pg_is_in_recovery()")
        port = await conn.fetchval("SELECT current_setting('port')::int")
        return port, bool(in_recovery)
    finally:
        await conn.close()


async def test_a_hot_standby_is_passed_over(pair: tuple[int, int]) -> None:
    primary, standby = pair
    # Any: the first host that answers, the standby.
    assert await _recovery(_url(standby, primary, attrs="any")) == (standby, True)
    for attrs in ("read-write", "primary"):
        assert await _recovery(_url(standby, primary, attrs=attrs)) == (primary, False)
    with pytest.raises(OperationalError, match="no host is read-write"):
        await db.connect(_url(standby))


async def test_read_only_by_default_is_not_read_write_but_is_primary(
    pair: tuple[int, int],
) -> None:
    primary, _ = pair
    admin = await db.connect(_url(primary))
    try:
        await admin.execute("DROP DATABASE IF EXISTS ro_default")
        await admin.execute("CREATE DATABASE ro_default")
        await admin.execute("ALTER DATABASE ro_default SET default_transaction_read_only = on")
    finally:
        await admin.close()
    with pytest.raises(OperationalError, match="no host is read-write"):
        await db.connect(_url(primary, database="ro_default"))
    assert await _recovery(_url(primary, database="ro_default", attrs="primary")) == (
        primary,
        False,
    )


async def test_the_cli_and_the_worker_skip_the_standby(pair: tuple[int, int]) -> None:
    primary, standby = pair
    admin = await db.connect(_url(primary))
    try:
        await admin.execute("DROP DATABASE IF EXISTS dispatcher_ha WITH (FORCE)")
        await admin.execute("CREATE DATABASE dispatcher_ha")
    finally:
        await admin.close()
    # A standby lacking the database answers "does not exist", which (as in
    # libpq) stops the walk: wait for it to replay the CREATE DATABASE.
    replica = await db.connect(_url(standby, attrs="any"))
    try:
        async with asyncio.timeout(30):
            while not await replica.fetchval(
                "SELECT count(*) FROM pg_database WHERE datname = 'dispatcher_ha'"
            ):
                await asyncio.sleep(0.1)
    finally:
        await replica.close()
    url = _url(standby, primary, database="dispatcher_ha")
    for args in (["migrate"], ["health", "--json"], ["run", "--drain"]):
        code, _, err = await cli(url, *args)
        assert code == 0, f"{args}: {err[-1500:]}"
