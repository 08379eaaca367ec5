"""Whether this worker can reach its database, said once per change.

Every background job of the worker reports here after talking to the
database. The first failure of an outage logs one line (`database_lost`,
with where and why, never a traceback); the first success after it logs
one line with how long it lasted (`database_back`). Health reports and
/metrics read `connected` and `down_for_s`.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable

from dispatcher import log
from dispatcher.db import DATABASE_ERRORS, one_line


class Connectivity:
    def __init__(self) -> None:
        self.connected = True
        self._lost_at = 0.0
        self.outages = 0

    def failed(self, where: str, exc: BaseException) -> None:
        if not self.connected:
            return
        self.connected = False
        self._lost_at = time.monotonic()
        self.outages += 1
        log.event(
            "database_lost",
            logging.WARNING,
            where=where,
            error=f"{type(exc).__name__}: {one_line(exc)}"[:200],
        )

    def ok(self) -> None:
        if self.connected:
            return
        self.connected = True
        log.event("database_back", down_s=round(time.monotonic() - self._lost_at, 1))

    def down_for_s(self) -> float:
        return 0.0 if self.connected else time.monotonic() - self._lost_at

    async def every(
        self,
        interval_s: float,
        where: str,
        step: Callable[[], Awaitable[None]],
        *,
        early: asyncio.Event | None = None,
    ) -> None:
        """Runs `step` every interval, forever, riding through database
        errors; at once when `early` is set (it is cleared)."""
        while True:
            if early is None:
                await asyncio.sleep(interval_s)
            else:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(early.wait(), interval_s)
                early.clear()
            try:
                await step()
            except DATABASE_ERRORS as exc:
                self.failed(where, exc)
            else:
                self.ok()
