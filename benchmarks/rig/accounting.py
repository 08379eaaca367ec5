"""What one fault cost, from what the producer had acknowledged and when
each id first reached the receiver. Pure: no I/O, no clock of its own.

- lost: acknowledged, never delivered once the run drained;
- stall_s: the longest stretch after the fault without a new delivery;
- back_s: fault to the first delivery that ended that stretch (when it was
  shorter than STALL_S, deliveries never stopped: fault to the first
  delivery after it);
- steady_s: fault to the first two seconds in a row each delivering at
  least STEADY_SHARE of the producer's rate, from back_s on.
"""

from __future__ import annotations

import bisect
from collections.abc import Mapping
from typing import Any

STEADY_SHARE = 0.8
STEP_S = 0.1
STALL_S = 1.0  # a shorter gap is the stream's own jitter, not an outage


def stall(times: list[float], t_fault: float, until: float) -> tuple[float, float]:
    """(longest gap, its end) among sorted arrival times in [t_fault, until],
    counting from t_fault (a fault after which nothing arrives stalls from it)."""
    prev, worst, end = t_fault, 0.0, t_fault
    for t in times[bisect.bisect_left(times, t_fault) : bisect.bisect_right(times, until)]:
        if t - prev > worst:
            worst, end = t - prev, t
        prev = t
    if until - prev > worst:  # still stalled when the window closed
        worst, end = until - prev, until
    return worst, end


def steady_from(times: list[float], start: float, until: float, per_s: float) -> float | None:
    """First t >= start with >= per_s arrivals in [t, t+1) and in [t+1, t+2)."""
    t = start
    while t + 2 <= until:
        a = bisect.bisect_left(times, t)
        b = bisect.bisect_left(times, t + 1)
        c = bisect.bisect_left(times, t + 2)
        if b - a >= per_s and c - b >= per_s:
            return t
        t += STEP_S
    return None


def account(
    *,
    acked: Mapping[str, float],
    phase_ids: set[str],
    arrivals: Mapping[str, float],
    t_fault: float,
    until: float,
    rate: int,
) -> dict[str, Any]:
    """One fault's accounting. phase_ids: every id that arrived and belongs
    to the phase (acknowledged or not); arrivals: first arrival per id."""
    times = sorted(arrivals[i] for i in phase_ids)
    lost = sorted(i for i in acked if i not in arrivals)
    gap, end = stall(times, t_fault, until)
    if gap < STALL_S:
        i = bisect.bisect_right(times, t_fault)
        end = times[i] if i < len(times) else until
    steady = steady_from(times, end, until, STEADY_SHARE * rate)
    return {
        "enqueued": len(acked),
        "delivered": len(phase_ids),
        "lost": len(lost),
        "lost_ids": lost[:20],
        "stall_s": round(gap, 2),
        "back_s": round(end - t_fault, 2),
        "steady_s": None if steady is None else round(steady - t_fault, 2),
    }
