"""LISTEN for due work on a dedicated connection, reconnecting when it drops.

A notification only sets an event: the engine's poll interval remains the
guarantee, so a lost notification delays work by one poll at most. The
engine supervises `run()`; losing and regaining the connection is reported
to the worker's Connectivity, which says it once.
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

import asyncpg

from dispatcher.db import DATABASE_ERRORS, open_connection, ping
from dispatcher.worker.connectivity import Connectivity

CHANNEL = "dispatcher_due"
# Endpoints or their secrets changed (a statement trigger, schema 012).
ENDPOINTS_CHANNEL = "dispatcher_endpoints"
MAX_BACKOFF_S = 10.0
# An idle connection whose network went silent is told by nothing but
# keepalives, which a proxy or a stalled server answers: a ping this often
# finds it, so notifications are not lost for long.
PING_S = 5.0
PING_TIMEOUT_S = 3.0


class Listener:
    def __init__(
        self,
        url: str,
        wake: asyncio.Event,
        connectivity: Connectivity,
        endpoints_changed: asyncio.Event | None = None,
    ) -> None:
        self._url = url
        self._wake = wake
        self._endpoints_changed = endpoints_changed or asyncio.Event()
        self._db = connectivity
        self._conn: asyncpg.Connection | None = None
        self._lost = asyncio.Event()

    def _notified(self, *_: Any) -> None:
        self._wake.set()

    def _endpoints_notified(self, *_: Any) -> None:
        self._endpoints_changed.set()

    def _terminated(self, *_: Any) -> None:
        self._lost.set()

    async def connect(self) -> None:
        conn = await open_connection(self._url)
        try:
            conn.add_termination_listener(self._terminated)
            await conn.add_listener(CHANNEL, self._notified)
            await conn.add_listener(ENDPOINTS_CHANNEL, self._endpoints_notified)
        except BaseException:
            conn.terminate()
            raise
        self._conn = conn
        # Anything committed while we were not listening is due now.
        self._wake.set()

    async def run(self) -> None:
        delay = 0.5
        while True:
            await self._until_lost()
            self._lost.clear()
            self._close_now()
            while True:
                started = self._db.now()
                try:
                    await self.connect()
                except DATABASE_ERRORS as exc:
                    self._db.failed("listen", exc, started=started)
                    await asyncio.sleep(delay)
                    delay = min(delay * 2, MAX_BACKOFF_S)
                else:
                    delay = 0.5
                    self._db.ok(started=started, wrote=False)
                    # Endpoints may have changed unheard: read them again. (Not
                    # on the first connect: the engine reads them right after.)
                    self._endpoints_changed.set()
                    break

    async def _until_lost(self) -> None:
        while True:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._lost.wait(), PING_S)
                return
            if self._conn is None:
                return
            try:
                await ping(self._conn, PING_TIMEOUT_S)
            except DATABASE_ERRORS:
                return  # said by the reconnect's failure, if it is an outage

    def _close_now(self) -> None:
        if self._conn is not None:
            self._conn.terminate()
            self._conn = None

    async def close(self) -> None:
        if self._conn is not None and not self._conn.is_closed():
            with contextlib.suppress(Exception):
                await self._conn.close(timeout=2)
        self._conn = None
