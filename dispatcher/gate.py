"""The per-endpoint gate: token bucket, semaphore and breaker view.

One Gate per endpoint per process. It answers two questions for the engine:
how many rows of this endpoint the next claim may take (so a claim never
holds rows it cannot start soon), and whether a claimed row may be sent now.
"""

from __future__ import annotations

import asyncio
import math

from aiolimiter import AsyncLimiter

from .breaker import Breaker, BreakerState, admits
from .models import Endpoint
from .sender import EndpointWire

# Rows of a rate-limited endpoint claimed ahead of their tokens: about this
# many seconds of its rate, so claimed rows wait for a token briefly, never
# for a large part of their lease.
RATE_LOOKAHEAD_S = 1.0


class Gate:
    __slots__ = (
        "breaker",
        "claimed",
        "endpoint",
        "limiter",
        "p95_ms",
        "probe_sent",
        "probing",
        "sem",
        "success_written_at",
        "wire",
    )

    def __init__(self, endpoint: Endpoint, wire: EndpointWire, breaker: Breaker) -> None:
        self.endpoint = endpoint
        self.wire = wire
        self.breaker = breaker
        self.sem = asyncio.Semaphore(endpoint.max_in_flight)
        self.limiter = _limiter(endpoint)
        self.claimed = 0  # claimed by this process, outcome not yet buffered
        self.probing = False  # this process won the half-open probe
        self.probe_sent = False
        self.p95_ms: float | None = None
        self.success_written_at = 0.0

    def reconfigure(self, endpoint: Endpoint, wire: EndpointWire) -> None:
        old = self.endpoint
        self.endpoint = endpoint
        self.wire = wire
        if (old.rate_per_s, old.burst) != (endpoint.rate_per_s, endpoint.burst):
            self.limiter = _limiter(endpoint)
        if old.max_in_flight != endpoint.max_in_flight:
            # Rows already holding the old semaphore finish under it.
            self.sem = asyncio.Semaphore(endpoint.max_in_flight)

    def sendable(self) -> bool:
        """Ordinary traffic may flow, or this process holds the probe."""
        if not self.endpoint.enabled:
            return False
        if admits(self.breaker):
            return True
        return self.breaker.state is BreakerState.HALF_OPEN and self.probing

    def budget(self) -> int:
        """Rows the next claim may take for this endpoint."""
        if not self.endpoint.enabled:
            return 0
        if not admits(self.breaker):
            if self.breaker.state is BreakerState.HALF_OPEN and self.probing:
                return 0 if (self.probe_sent or self.claimed) else 1
            return 0
        n = self.endpoint.max_in_flight - self.claimed
        ep = self.endpoint
        if ep.rate_per_s is not None:
            burst = ep.burst or max(1, math.ceil(ep.rate_per_s))
            n = min(n, math.ceil(burst + ep.rate_per_s * RATE_LOOKAHEAD_S) - self.claimed)
        return max(n, 0)

    def lease_s(self, margin_s: float) -> float:
        # The wait for a token is bounded by RATE_LOOKAHEAD_S via budget().
        return self.endpoint.timeout_ms / 1000 + RATE_LOOKAHEAD_S + margin_s


def _limiter(endpoint: Endpoint) -> AsyncLimiter | None:
    if endpoint.rate_per_s is None:
        return None
    burst = endpoint.burst or max(1, math.ceil(endpoint.rate_per_s))
    # aiolimiter's bucket holds max_rate tokens and refills them over
    # time_period: capacity `burst` refilled at rate_per_s.
    return AsyncLimiter(burst, burst / endpoint.rate_per_s)
