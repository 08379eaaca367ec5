"""The per-endpoint gate: token bucket, semaphore, adaptive limit, breaker view.

One Gate per endpoint per process. It answers two questions for the engine:
how many rows of this endpoint the next claim may take (so a claim never
holds rows it cannot start soon), and whether a claimed row may be sent now.

Limits hold for the endpoint as a whole: with n live workers each gate runs
on its share (see `split`), re-balanced as workers come and go.
"""

from __future__ import annotations

import asyncio
import math
import time

from aiolimiter import AsyncLimiter

from . import concurrency
from .breaker import Breaker, BreakerState, admits
from .models import Endpoint
from .sender import EndpointWire

# Rows of a rate-limited endpoint claimed ahead of their tokens: about this
# many seconds of its rate, so claimed rows wait for a token briefly, never
# for a large part of their lease.
RATE_LOOKAHEAD_S = 1.0


def split(total: int, workers: int, index: int, salt: int) -> int:
    """This worker's whole share of `total`; the shares add up to `total`.

    The remainder goes to different workers for different endpoints (salt),
    so many endpoints with a limit of 1 spread over the workers.
    """
    base, extra = divmod(total, workers)
    return base + (1 if (index - salt) % workers < extra else 0)


def _tokens(limiter: AsyncLimiter, burst: int) -> int:
    """Whole tokens in the bucket now (has_capacity is monotonic: bisect it,
    rather than asking once per possible token on every claim)."""
    lo, hi = 0, burst
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if limiter.has_capacity(mid):
            lo = mid
        else:
            hi = mid - 1
    return lo


class Gate:
    __slots__ = (
        "adaptive",
        "breaker",
        "claimed",
        "db_clean",
        "endpoint",
        "limiter",
        "max_share",
        "p95_ms",
        "paused_until",
        "probe_sent",
        "probing",
        "rate_share",
        "sem",
        "success_written_at",
        "wire",
    )

    def __init__(self, endpoint: Endpoint, wire: EndpointWire, breaker: Breaker) -> None:
        self.endpoint = endpoint
        self.wire = wire
        self.breaker = breaker
        self.max_share = endpoint.max_in_flight  # this process's part of max_in_flight
        self.rate_share = endpoint.rate_per_s
        self.sem = asyncio.Semaphore(endpoint.max_in_flight)
        self.limiter = self._limiter()
        self.adaptive = concurrency.initial(endpoint.max_in_flight)
        self.claimed = 0  # claimed by this process, outcome not yet buffered
        self.probing = False  # this process won the half-open probe
        self.probe_sent = False
        self.p95_ms: float | None = None
        self.paused_until = 0.0  # monotonic; Retry-After pauses the endpoint
        self.success_written_at = 0.0
        self.db_clean = False  # the stored breaker is closed with no failures

    def reconfigure(self, endpoint: Endpoint, wire: EndpointWire) -> None:
        old = self.endpoint
        self.endpoint = endpoint
        self.wire = wire
        if old.max_in_flight != endpoint.max_in_flight:
            # Rows already holding the old semaphore finish under it.
            self.sem = asyncio.Semaphore(endpoint.max_in_flight)
            self.adaptive = concurrency.resize(self.adaptive, endpoint.max_in_flight)
        if (old.rate_per_s, old.burst, old.max_in_flight) != (
            endpoint.rate_per_s,
            endpoint.burst,
            endpoint.max_in_flight,
        ):
            self.max_share = endpoint.max_in_flight
            self.rate_share = endpoint.rate_per_s
            self.limiter = self._limiter()

    def apply_share(self, workers: int, index: int) -> None:
        ep = self.endpoint
        share = split(ep.max_in_flight, workers, index, ep.id)
        rate = None if ep.rate_per_s is None else ep.rate_per_s * share / ep.max_in_flight
        if (share, rate) == (self.max_share, self.rate_share):
            return
        self.max_share = share
        self.rate_share = rate
        self.limiter = self._limiter()
        self.adaptive = concurrency.resize(self.adaptive, max(share, 1))

    def _burst(self) -> int:
        ep = self.endpoint
        assert self.rate_share is not None and ep.rate_per_s is not None
        full = ep.burst or max(1, math.ceil(ep.rate_per_s))
        return max(1, round(full * self.rate_share / ep.rate_per_s))

    def _limiter(self) -> AsyncLimiter | None:
        if self.rate_share is None or self.rate_share <= 0:
            return None
        burst = self._burst()
        # aiolimiter's bucket holds max_rate tokens and refills them over
        # time_period: capacity `burst` refilled at rate_share per second.
        return AsyncLimiter(burst, burst / self.rate_share)

    def paused_for(self, now: float | None = None) -> float:
        return max(0.0, self.paused_until - (time.monotonic() if now is None else now))

    def sendable(self) -> bool:
        """Ordinary traffic may flow, or this process holds the probe."""
        if not self.endpoint.enabled or self.max_share <= 0:
            return False
        if admits(self.breaker):
            return True
        return self.breaker.state is BreakerState.HALF_OPEN and self.probing

    def budget(self, now: float) -> int:
        """Rows the next claim may take for this endpoint."""
        if not self.endpoint.enabled or self.max_share <= 0 or self.paused_until > now:
            return 0
        if not admits(self.breaker):
            if self.breaker.state is BreakerState.HALF_OPEN and self.probing:
                return 0 if (self.probe_sent or self.claimed) else 1
            return 0
        n = min(self.max_share, self.adaptive.current) - self.claimed
        if self.limiter is not None and self.rate_share is not None:
            # The tokens there now, plus what refills within the lookahead:
            # no claimed row waits for a token much longer than a second,
            # so none outlives its lease however slow the rate.
            ahead = _tokens(self.limiter, self._burst()) + math.floor(
                self.rate_share * RATE_LOOKAHEAD_S
            )
            n = min(n, ahead - self.claimed)
        return max(n, 0)

    def lease_s(self, margin_s: float) -> float:
        # The wait for a token is bounded by RATE_LOOKAHEAD_S via budget().
        return self.endpoint.timeout_ms / 1000 + RATE_LOOKAHEAD_S + margin_s
