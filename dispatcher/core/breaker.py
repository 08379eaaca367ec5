"""Circuit breaker per endpoint, as a pure state machine.

closed --(threshold consecutive failures)--> open
open --(cooldown elapsed, one worker wins the probe)--> half_open
half_open --(probe succeeds)--> closed (cooldown back to the endpoint's base)
half_open --(probe fails)--> open with the cooldown doubled, capped

Time is passed in (epoch seconds) and every function returns a new value;
the store persists the values and decides, with a conditional UPDATE, which
worker may take the probe.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable
from dataclasses import dataclass, replace

MAX_COOLDOWN_S = 3600.0
# SPEC: endpoints whose p95 is over 5 s get a lower threshold: a slow
# endpoint is usually one about to fall over, and each of its failures costs
# a whole timeout of a connection slot.
SLOW_P95_MS = 5000.0


class BreakerState(enum.StrEnum):
    CLOSED = "closed"
    OPEN = "open"
    HALF_OPEN = "half_open"


@dataclass(frozen=True, kw_only=True, slots=True)
class Breaker:
    state: BreakerState = BreakerState.CLOSED
    consecutive_failures: int = 0
    opened_at: float | None = None
    cooldown_s: float = 300.0
    last_failure_at: float | None = None
    last_success_at: float | None = None


def effective_threshold(threshold: int, p95_ms: float | None) -> int:
    if p95_ms is not None and p95_ms > SLOW_P95_MS:
        return max(1, threshold // 2)
    return max(1, threshold)


def on_success(b: Breaker, now: float, *, base_cooldown_s: float) -> Breaker:
    if b.state is BreakerState.OPEN:
        # A request that started before the breaker opened; it proves little,
        # and closing here would let a flood through without a probe.
        return replace(b, last_success_at=now)
    if (b.state is BreakerState.CLOSED and b.last_success_at == now and not b.consecutive_failures
            and b.opened_at is None and b.cooldown_s == base_cooldown_s):  # fmt: skip
        return b  # a run of successes folded at one time: the same value, not another
    return Breaker(
        state=BreakerState.CLOSED,
        consecutive_failures=0,
        opened_at=None,
        cooldown_s=base_cooldown_s,
        last_failure_at=b.last_failure_at,
        last_success_at=now,
    )


def on_failure(b: Breaker, now: float, *, threshold: int) -> Breaker:
    failures = b.consecutive_failures + 1
    if b.state is BreakerState.HALF_OPEN:
        return replace(
            b,
            state=BreakerState.OPEN,
            consecutive_failures=failures,
            opened_at=now,
            cooldown_s=min(b.cooldown_s * 2, MAX_COOLDOWN_S),
            last_failure_at=now,
        )
    if b.state is BreakerState.CLOSED and failures >= threshold:
        return replace(
            b,
            state=BreakerState.OPEN,
            consecutive_failures=failures,
            opened_at=now,
            last_failure_at=now,
        )
    return replace(b, consecutive_failures=failures, last_failure_at=now)


def probe_due(b: Breaker, now: float) -> bool:
    """True when an open breaker's cooldown has run out."""
    return (
        b.state is BreakerState.OPEN
        and b.opened_at is not None
        and now >= b.opened_at + b.cooldown_s
    )


def half_open(b: Breaker) -> Breaker:
    """The probe was won (the store decides who, once the cooldown ran out)."""
    return replace(b, state=BreakerState.HALF_OPEN)


def admits(b: Breaker) -> bool:
    """Whether ordinary (non-probe) traffic may flow."""
    return b.state is BreakerState.CLOSED


@dataclass(frozen=True, slots=True)
class Transition:
    from_state: BreakerState
    to_state: BreakerState
    cooldown_s: float


def fold(
    b: Breaker,
    successes: Iterable[bool],
    now: float,
    *,
    threshold: int,
    base_cooldown_s: float,
) -> tuple[Breaker, list[Transition]]:
    """Applies attempt results, in the order the attempts were sent; returns
    the new breaker and every state change on the way. The one place
    transitions are computed, for the local view and the stored one alike."""
    transitions: list[Transition] = []
    for ok in successes:
        nb = (
            on_success(b, now, base_cooldown_s=base_cooldown_s)
            if ok
            else on_failure(b, now, threshold=threshold)
        )
        if nb.state is not b.state:
            transitions.append(Transition(b.state, nb.state, nb.cooldown_s))
        b = nb
    return b, transitions
