"""LISTEN for due work on a dedicated connection, reconnecting when it drops.

A notification only sets an event: the engine's poll interval remains the
guarantee, so a lost notification delays work by one poll at most.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import Any

import asyncpg

from . import log

CHANNEL = "dispatcher_due"


class Listener:
    def __init__(self, url: str, wake: asyncio.Event) -> None:
        self._url = url
        self._wake = wake
        self._conn: asyncpg.Connection | None = None
        self._task: asyncio.Task[None] | None = None
        self._lost = asyncio.Event()

    def _notified(self, *_: Any) -> None:
        self._wake.set()

    def _terminated(self, *_: Any) -> None:
        self._lost.set()

    async def _connect(self) -> None:
        conn = await asyncpg.connect(self._url, timeout=10)
        conn.add_termination_listener(self._terminated)
        await conn.add_listener(CHANNEL, self._notified)
        self._conn = conn
        # Anything committed while we were not listening is due now.
        self._wake.set()

    async def start(self) -> None:
        await self._connect()
        self._task = asyncio.create_task(self._keep_alive(), name="dispatcher-listener")

    async def _keep_alive(self) -> None:
        delay = 0.5
        while True:
            await self._lost.wait()
            self._lost.clear()
            log.event("listener_lost", logging.WARNING)
            while True:
                try:
                    await self._connect()
                    delay = 0.5
                    log.event("listener_reconnected")
                    break
                except (OSError, asyncpg.PostgresError, TimeoutError):
                    await asyncio.sleep(delay)
                    delay = min(delay * 2, 10.0)

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        if self._conn is not None and not self._conn.is_closed():
            with contextlib.suppress(Exception):
                await self._conn.close(timeout=2)
