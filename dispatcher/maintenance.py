"""Periodic upkeep by one worker at a time: percentiles, pruning, retention.

The store takes an advisory lock per round, so with many workers one does
the work and the others skip; the retention walk resumes from a cursor.
"""

from __future__ import annotations

import asyncpg

from . import store
from .connectivity import Connectivity
from .db import acquire
from .settings import Settings


class Maintenance:
    def __init__(
        self, pool: asyncpg.Pool, *, settings: Settings, connectivity: Connectivity
    ) -> None:
        self._pool = pool
        self._settings = settings
        self._db = connectivity
        self._cursor = 0  # where the retention walk of the queue resumes

    async def once(self) -> None:
        s = self._settings
        async with acquire(self._pool) as conn:
            cursor = await store.maintain(
                conn, s.latency_window_s, s.delivered_retention_s, cursor=self._cursor
            )
        if cursor is not None:
            self._cursor = cursor

    async def run(self) -> None:
        await self._db.every(self._settings.percentile_refresh_s, "maintenance", self.once)
