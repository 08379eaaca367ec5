"""One endpoint's token bucket in this process: aiolimiter's, resized in place.

Two things aiolimiter does not do, and limits shared across processes need
(core/shares.py): a bucket that starts empty, since a process that starts
does not know what the endpoint was sent in the last second (its
predecessor's, or the other workers', tokens); and a resize that keeps the
tokens there are (never more than the new capacity) and applies at once to
the rows already waiting for a token. Replacing the limiter, as before,
handed every resize a full bucket and left the waiting rows on the old
rate. Both reach into aiolimiter's state, hence its exact pin in
pyproject.toml; tests/unit/test_gate.py holds the behaviour.

It must never sleep or read a clock other than the event loop's (aiolimiter
measures with loop.time()).
"""

from __future__ import annotations

import asyncio
import math
import time

from aiolimiter import AsyncLimiter


def _loop_time() -> float:
    try:
        return asyncio.get_running_loop().time()
    except RuntimeError:  # a gate built outside a loop (unit tests)
        return time.monotonic()


class Bucket:
    """Capacity `capacity` tokens, refilled at `rate` a second, empty at first."""

    __slots__ = ("_limiter",)

    def __init__(self, capacity: int, rate: float) -> None:
        limiter = AsyncLimiter(capacity, capacity / rate)
        # aiolimiter's level is what is used of max_rate: full means empty.
        limiter._level = float(capacity)
        limiter._last_check = _loop_time()
        self._limiter = limiter

    @property
    def capacity(self) -> int:
        return int(self._limiter.max_rate)

    @property
    def rate(self) -> float:
        return float(self._limiter._rate_per_sec)

    def tokens(self) -> int:
        """Whole tokens in the bucket now."""
        lim = self._limiter
        lim._leak()
        return max(0, math.floor(lim.max_rate - lim._level + 1e-9))

    async def acquire(self) -> None:
        await self._limiter.acquire()

    def resize(self, capacity: int, rate: float) -> None:
        lim = self._limiter
        if (capacity, rate) == (self.capacity, self.rate):
            return
        lim._leak()
        kept = min(max(0.0, lim.max_rate - lim._level), float(capacity))
        lim.max_rate = capacity
        lim.time_period = capacity / rate
        lim._rate_per_sec = rate
        lim._level = capacity - kept
        if lim._waiters:
            lim._wake_next()  # their next token comes at the new rate
