"""Connections, the named queries and (from migrator.py) the migration
runner: what every data-access module shares.

Queries live in queries.sql as named blocks (`-- name: x`); the schema in
schema/, as numbered migrations (tables and data, each applied once) and
the repeatable files of schema/functions/ (functions and triggers, defined
once and applied again whenever their text changes). The data-access
modules (store for the worker's hot path, upkeep for maintenance, catalog
for endpoints, events and reports) bind the queries to connections. No
other module runs SQL.

Driver errors are classified here, once: `TRANSIENT` lists every error that
means "the database or the connection to it failed" (retry later), as
opposed to an error in what was asked.
"""

from __future__ import annotations

import contextlib
import importlib.resources
import socket
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

import asyncpg

from dispatcher.core.dburl import check_database_url
from dispatcher.core.errors import OperationalError
from dispatcher.db import hosts
from dispatcher.db.base import MAINTENANCE_LOCK as MAINTENANCE_LOCK
from dispatcher.db.base import MIGRATION_LOCK as MIGRATION_LOCK
from dispatcher.db.base import Conn as Conn
from dispatcher.db.embedded import with_database

# The migration runner, re-exported (pyproject's mypy section lets this
# package re-export): what callers have always reached as db.migrate,
# db.migrations and the rest.
from dispatcher.db.migrator import (  # noqa: F401
    AFTER,
    DAY_PARTITIONED,
    HISTORY_PARTITIONED,
    REPEATABLE_PREFIX,
    UNUSABLE_PATTERN,
    has_statements,
    migrate,
    migrations,
    migrations_current,
    repeatables,
    require_schema,
)

# Connection-level failures: the socket, the server going away or refusing
# connections (restart, failover, pg_terminate_backend), and asyncpg's own
# client-side errors once its protocol state is broken by one of those.
TRANSIENT: tuple[type[Exception], ...] = (
    OSError,
    TimeoutError,
    ConnectionError,
    asyncpg.PostgresConnectionError,
    asyncpg.InterfaceError,
    asyncpg.InternalClientError,
    asyncpg.CannotConnectNowError,
    asyncpg.AdminShutdownError,
    asyncpg.CrashShutdownError,
    asyncpg.TooManyConnectionsError,
    asyncpg.ConnectionFailureError,
)

# Anything that can come back from talking to the database: what a worker's
# loop survives (and retries), where a CLI command would stop with one line.
DATABASE_ERRORS: tuple[type[Exception], ...] = (*TRANSIENT, asyncpg.PostgresError)


def refuses_writes(exc: BaseException) -> bool:
    """The database answered but will not write: out of disk or another
    resource (SQLSTATE class 53, but for too_many_connections, which refuses
    the connection itself), or read-only (25006: a standby, or
    default_transaction_read_only)."""
    state = getattr(exc, "sqlstate", None)
    if not isinstance(exc, asyncpg.PostgresError) or not isinstance(state, str):
        return False
    return (state.startswith("53") and state != "53300") or state == "25006"


def _load_queries() -> dict[str, str]:
    text = importlib.resources.files("dispatcher.db").joinpath("queries.sql").read_text()
    queries: dict[str, str] = {}
    name: str | None = None
    for line in text.splitlines():
        if line.startswith("-- name: "):
            name = line.removeprefix("-- name: ").strip()
            queries[name] = ""
        elif name is not None:
            queries[name] += line + "\n"
    return {k: v.strip().rstrip(";") for k, v in queries.items()}


Q = _load_queries()


def one_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0] if text else type(exc).__name__


def where(url: str) -> str:
    """Where a URL points, for an error message: each host:port or socket,
    and the database; never the user's password."""
    parts = urlsplit(url)
    query = parse_qs(parts.query)
    name = unquote(parts.path.lstrip("/")) or query.get("dbname", [""])[0]
    named = hosts.hosts(url)
    if not named:
        place = "the default host (PGHOST, else the local socket or localhost)"
    else:
        place = ",".join(_place(h) for h in named)
    return f"{place}, database {name}" if name else place


def _place(host: str) -> str:
    folder, colon, port = host.rpartition(":")
    if not (colon and port.isdigit() and not host.endswith("]")):
        folder, port = host, "5432"
    if folder.startswith("/"):
        return f"socket {folder.rstrip('/')}/.s.PGSQL.{port}"
    return f"{folder}:{port}"


def _cannot_connect(url: str, exc: BaseException) -> OperationalError:
    if isinstance(exc, asyncpg.TargetServerAttributeNotMatched):
        wanted = parse_qs(urlsplit(url).query).get("target_session_attrs", ["?"])[-1]
        why = f"no host is {wanted} (target_session_attrs)"
        if wanted in ("read-write", "primary"):
            why += ": a failover under way, or no primary"
    else:
        why = one_line(exc)
    return OperationalError(f"cannot connect to the database at {where(url)}: {why}")


# TCP keepalives and a user timeout on every connection: a database gone
# silent (a black hole: packets dropped, nothing refused) is otherwise noticed
# only by a statement's timeout, and an idle connection (the listener's, a
# pooled one) never. Probes after 3 s of silence, 1 s apart, 3 unanswered:
# about 6 s; data unacknowledged for 8 s fails the socket. Socket options,
# not statements: nothing is added to the hot path.
KEEPALIVE_IDLE_S = 3
KEEPALIVE_INTERVAL_S = 1
KEEPALIVE_COUNT = 3
USER_TIMEOUT_MS = 8000
# How long opening a connection may take before it counts as failed.
CONNECT_TIMEOUT_S = 5.0


def keep_alive(conn: asyncpg.Connection) -> None:
    """Sets the keepalive options on the connection's TCP socket (a Unix
    socket has none to set). asyncpg offers no public handle on the socket;
    its transport's is the one the connection reads."""
    transport = getattr(conn, "_transport", None)
    sock = None if transport is None else transport.get_extra_info("socket")
    if sock is None or sock.family not in (socket.AF_INET, socket.AF_INET6):
        return
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
    for name, value in (
        ("TCP_KEEPIDLE", KEEPALIVE_IDLE_S),
        ("TCP_KEEPINTVL", KEEPALIVE_INTERVAL_S),
        ("TCP_KEEPCNT", KEEPALIVE_COUNT),
        ("TCP_USER_TIMEOUT", USER_TIMEOUT_MS),
    ):
        if hasattr(socket, name):  # Linux has them all; others some
            sock.setsockopt(socket.IPPROTO_TCP, getattr(socket, name), value)


# Per URL, the host of a multi-host URL that last gave a usable connection:
# tried first next time, so that after a failover (or with the first host
# gone silent) the new primary is found once, not behind a dead host's
# timeout on every new connection. Only this module reads or writes it.
_preferred: dict[str, int] = {}


async def connect_any(
    dsn: str | None = None, *, timeout: float = CONNECT_TIMEOUT_S, **kwargs: Any
) -> asyncpg.Connection:
    """asyncpg.connect, one host at a time (dispatcher.db.hosts): each host
    with a timeout of its own (the URL's connect_timeout, else `timeout`).
    The next host is tried when one does not answer, refuses, is starting
    or stopping, or is not what target_session_attrs asks for; an error in
    what was asked (a wrong password, no such database) stops there, as in
    libpq. Also the pool's `connect` (it passes its own keyword arguments)."""
    assert dsn is not None
    target = hosts.target(dsn)
    per_host = target.connect_timeout or timeout
    if len(target.urls) == 1:
        return await asyncpg.connect(target.urls[0], timeout=per_host, **kwargs)
    first = _preferred.get(dsn, 0)
    error: BaseException | None = None
    for i in (first, *(i for i in range(len(target.urls)) if i != first)):
        try:
            conn: asyncpg.Connection = await asyncpg.connect(
                target.urls[i], timeout=per_host, **kwargs
            )
        except TRANSIENT as exc:
            # A host that answered but is not what was asked says more
            # than one that did not answer: that one is reported.
            if error is None or not isinstance(error, asyncpg.TargetServerAttributeNotMatched):
                error = exc
            continue
        _preferred[dsn] = i
        return conn
    assert error is not None
    raise error


async def open_connection(
    url: str, *, command_timeout: float | None = None, timeout: float = CONNECT_TIMEOUT_S
) -> asyncpg.Connection:
    """A connection of its own (not pooled), keepalives set."""
    conn = await connect_any(url, timeout=timeout, command_timeout=command_timeout)
    keep_alive(conn)
    return conn


async def ping(conn: Conn, timeout: float) -> None:
    """One round trip: the connection and the server under it still answer."""
    await conn.execute("SELECT 1", timeout=timeout)


async def connect(url: str) -> asyncpg.Connection:
    # Not a PostgreSQL URL: bad input, said as such, not a failed connection.
    check_database_url(url, "the database URL")
    try:
        return await open_connection(url, timeout=10)
    except DATABASE_ERRORS as exc:
        raise _cannot_connect(url, exc) from None


@contextlib.asynccontextmanager
async def acquire(pool: asyncpg.Pool) -> AsyncIterator[Conn]:
    """A pooled connection that is thrown away, not reused, after a
    connection-level failure: asyncpg can leave one in a protocol state that
    fails every later call ("another operation is in progress")."""
    async with pool.acquire() as conn:
        try:
            yield conn
        except TRANSIENT:
            conn.terminate()
            raise


async def _keep_session(_: asyncpg.Connection) -> None:
    """Pool reset hook that does nothing: our pooled connections never change
    session state (no LISTEN, no SET), so the default RESET ALL round trip on
    every release would be pure cost on the hot path."""


async def _new_connection(conn: asyncpg.Connection) -> None:
    keep_alive(conn)


OnConnect = Callable[[Conn], Awaitable[None]]


async def create_pool(
    url: str,
    *,
    size: int = 4,
    synchronous_commit: bool = True,
    command_timeout: float | None = None,
    connect_timeout: float = 10.0,
    on_connect: OnConnect | None = None,
) -> asyncpg.Pool:
    """`on_connect`: awaited on each new connection before the pool hands it
    out (the worker's rewrite after a failover, worker/rewriter.py)."""
    settings = {} if synchronous_commit else {"synchronous_commit": "off"}

    async def init(conn: asyncpg.Connection) -> None:
        await _new_connection(conn)
        if on_connect is not None:
            await on_connect(conn)

    try:
        pool = await asyncpg.create_pool(
            url,
            connect=connect_any,
            # No connection floor: asyncpg restores a floor in a task of its
            # own, outside our error handling; ours reconnect on demand.
            min_size=0,
            max_size=size,
            timeout=connect_timeout,
            init=init,
            reset=_keep_session,
            server_settings=settings,
            command_timeout=command_timeout,
        )
        assert pool is not None
        # Fail here, with one clear line, when the database is not there.
        async with pool.acquire() as conn:
            await conn.fetchval("SELECT 1")
    except DATABASE_ERRORS as exc:
        raise _cannot_connect(url, exc) from None
    assert pool is not None
    return pool


async def recreate_database(server_url: str, name: str) -> str:
    """Drops and creates database `name` on the server, migrated; returns its URL.

    For the demo and the benchmarks, which want a clean slate each run.
    """
    admin = await connect(server_url)
    try:
        await admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        await admin.execute(f'CREATE DATABASE "{name}"')
    finally:
        await admin.close()
    url = with_database(server_url, name)
    conn = await connect(url)
    try:
        await migrate(conn)
    finally:
        await conn.close()
    return url
