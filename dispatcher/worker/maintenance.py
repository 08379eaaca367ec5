"""Periodic upkeep by one worker at a time: percentiles, pruning, retention,
and keeping the hot tables vacuumed when autovacuum will not.

The store takes an advisory lock per round, so with many workers one does
the work and the others skip; each round goes on where the last stopped.
VACUUM cannot run in a transaction and may take a while on a large table:
it runs on a connection of its own, opened for it and closed after, under
a session lock so that two workers never vacuum at once.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import AsyncIterator

import asyncpg

from dispatcher import log
from dispatcher.core.tablehealth import TableHealth, vacuum_due
from dispatcher.db import Conn, acquire, latency, open_connection, upkeep
from dispatcher.settings import Settings
from dispatcher.worker.connectivity import Connectivity

VACUUM_STATEMENT_TIMEOUT_S = 600.0
MAINTENANCE_STATEMENT_TIMEOUT_S = 120.0


class Maintenance:
    def __init__(
        self,
        pool: asyncpg.Pool,
        *,
        settings: Settings,
        connectivity: Connectivity,
        url: str | None = None,
    ) -> None:
        self._pool = pool
        self._settings = settings
        self._db = connectivity
        self._url = url  # for the vacuum's own connection; None: no vacuums
        self.vacuums = 0

    async def once(self) -> None:
        s = self._settings
        async with self._connection() as conn:
            await upkeep.maintain(
                conn, s.latency_window_s, s.retention, dedup_window_s=s.dedup_window_s
            )
            due = [h for h in await upkeep.table_health(conn) if vacuum_due(h)]
        if due and self._url is not None:
            await self.vacuum(due)

    async def percentiles(self) -> None:
        """The stored percentiles once more, as the worker stops: a run
        shorter than a refresh interval (a short `run --drain`) leaves them
        in endpoint_health too (SPEC's database contract). Bounded, as the
        refresh is: it merges per-minute aggregates."""
        async with acquire(self._pool) as conn:
            await latency.refresh_percentiles(conn, self._settings.latency_window_s)

    @contextlib.asynccontextmanager
    async def _connection(self) -> AsyncIterator[Conn]:
        """Pruning and percentiles on a huge table may take longer than the
        pool's statement timeout allows (sized for the hot path): with a URL,
        on a connection of their own, with a timeout of their own."""
        if self._url is None:
            async with acquire(self._pool) as conn:
                yield conn
            return
        conn = await open_connection(self._url, command_timeout=MAINTENANCE_STATEMENT_TIMEOUT_S)
        try:
            yield conn
        finally:
            await _close(conn)

    async def vacuum(self, tables: list[TableHealth]) -> None:
        assert self._url is not None
        conn = await open_connection(self._url, command_timeout=VACUUM_STATEMENT_TIMEOUT_S)
        try:
            if not await upkeep.try_vacuum_lock(conn):
                return  # another worker is at it
            for h in tables:
                t0 = time.monotonic()
                await upkeep.vacuum(conn, h.table)
                self.vacuums += 1
                log.event("table_vacuumed", logging.INFO, table=h.table, dead_before=h.dead,
                          live=h.live, autovacuum_on=h.autovacuum_on,
                          seconds=round(time.monotonic() - t0, 2))  # fmt: skip
        finally:
            await _close(conn)

    async def run(self) -> None:
        await self._db.every(self._settings.percentile_refresh_s, "maintenance", self.once)


async def _close(conn: asyncpg.Connection) -> None:
    try:
        await conn.close(timeout=5)
    except Exception:
        conn.terminate()
