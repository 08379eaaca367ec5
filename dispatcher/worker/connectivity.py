"""Whether this worker can reach its database, said once per change.

Every background job of the worker reports here after each round trip to
the database, with when that round trip began; the rule for what to say
is core/connectivity.py. One line when an outage starts (`database_lost`,
with where and why, never a traceback), one when it is over
(`database_back`, with how long it lasted); `database_refusing_writes` and
`database_accepting_writes` around a database that answers but will not
write. Health reports and /metrics read `connected` and `down_for_s`.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable

from dispatcher import log
from dispatcher.core import connectivity as policy
from dispatcher.db import DATABASE_ERRORS, one_line, refuses_writes

_LEVELS = {"database_lost": logging.WARNING, "database_refusing_writes": logging.WARNING}


class Connectivity:
    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._link = policy.Link()

    def now(self) -> float:
        """When a round trip begins: what `failed` and `ok` are told."""
        return self._clock()

    @property
    def connected(self) -> bool:
        return self._link.up

    @property
    def refusing_writes(self) -> bool:
        return self._link.refusing

    @property
    def outages(self) -> int:
        return self._link.outages

    def failed(self, where: str, exc: BaseException, *, started: float) -> None:
        error = f"{type(exc).__name__}: {one_line(exc)}"[:200]
        self._link, said = policy.failed(
            self._link, now=self._clock(), started=started, where=where, error=error,
            refused=refuses_writes(exc),
        )  # fmt: skip
        self._say(said)

    def ok(self, *, started: float, wrote: bool) -> None:
        self._link, said = policy.answered(
            self._link, now=self._clock(), started=started, wrote=wrote
        )
        self._say(said)

    def _say(self, said: list[policy.Said]) -> None:
        for s in said:
            log.event(s.event, _LEVELS.get(s.event, logging.INFO), **s.fields)

    def down_for_s(self) -> float:
        return 0.0 if self._link.up else self._clock() - self._link.lost_at

    async def every(
        self,
        interval_s: float,
        where: str,
        step: Callable[[], Awaitable[None]],
        *,
        early: asyncio.Event | None = None,
        wrote: bool = True,
    ) -> None:
        """Runs `step` every interval, forever, riding through database
        errors; at once when `early` is set (it is cleared)."""
        while True:
            if early is None:
                await asyncio.sleep(interval_s)
            else:
                # asyncio.timeout, not wait_for: on 3.11, wait_for swallows a
                # cancellation that arrives as `early` is set, and the job
                # then runs on after its worker has stopped (a `run --drain`
                # that never exits). More likely since workers notify each
                # other of every share they apply (schema 017).
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(interval_s):
                        await early.wait()
                early.clear()
            started = self._clock()
            try:
                await step()
            except DATABASE_ERRORS as exc:
                self.failed(where, exc, started=started)
            else:
                self.ok(started=started, wrote=wrote)
