"""The process-wide window: how many requests one worker keeps in flight. Pure.

No fixed number suits every receiver. By Little's law a worker's rate is
what it has in flight divided by the receivers' latency: 1,000 in flight
is 5,000/s against 200 ms receivers, and the CPU of one process may well
sustain more; against 0 ms receivers the same 1,000 only queue up inside
the process, costing memory and latency for nothing. So the window is sized
from what the process can sustain, measured by its event loop:

- the engine samples the loop's lag (how late a short timer fires) and how
  many requests are in flight, every few tens of milliseconds;
- every `DECIDE_S`, from the median lag of the interval (one pause, a
  collection or a large claim, does not count as a trend): a loop answering on
  time while the window was full (it was what held the rate back) grows the
  window by `GROW`, or doubles it while the window is still ramping up (from
  the start until the loop is first seen busy or the window shrinks: like
  TCP's slow start, because against slow receivers every half second spent
  below what they allow is lost rate, Little's law); a loop far behind
  shrinks it by `SHRINK`; in between it holds. A busy loop alone is no
  reason to shrink: a process that is CPU-bound still needs rate x latency
  in flight, and a window cut below that loses rate (on a shared machine
  the loop also lags while other processes have the CPU). Only a lag that
  makes every request wait noticeably in our own queue (`LAG_HIGH_S`) takes
  the window down;
- the window stays between `FLOOR` and a ceiling (`CEILING`, lowered to what
  the descriptor limit allows: one socket per request).

An explicit `--max-in-flight N` fixes the window at N (never resized).
Per-endpoint limits (gate.py) still apply inside the window: it decides how
much this process takes on, never how much one endpoint gets.

`saturated` tells the gates the process itself is the bottleneck, so that
an endpoint's latency, inflated by our own queueing, is not mistaken for
the endpoint slowing down.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, replace

SAMPLE_S = 0.05  # how often the engine samples the loop
DECIDE_S = 0.5  # how often the window is resized
LAG_LOW_S = 0.010  # mean lag under this: the loop has headroom, the window may grow
LAG_BUSY_S = 0.030  # over this: the process is saturated (latency is partly ours)
LAG_HIGH_S = 0.150  # over this: requests queue in the process; the window shrinks
FULL_SHARE = 0.9  # in flight reached this share of the window: it was full
GROW = 1.25
RAMP_GROW = 2.0
SHRINK = 0.85
INITIAL = 2000
FLOOR = 256
CEILING = 5000  # ~25 KB per request in flight: well under 300 MB at the ceiling
FD_RESERVE = 256  # descriptors kept for the database, listener, logs


@dataclass(frozen=True, kw_only=True, slots=True)
class Window:
    limit: int
    floor: int
    ceiling: int
    fixed: bool = False
    saturated: bool = False  # the last interval's verdict
    ramping: bool = True  # not yet seen busy or shrunk: grows by RAMP_GROW
    # The open interval: since when, its lag samples, peak in flight.
    since: float = 0.0
    lags: tuple[float, ...] = ()
    peak: int = 0


def ceiling_for(fd_limit: int | None) -> int:
    """CEILING, or less when the descriptor limit cannot hold that many sockets."""
    if fd_limit is None or fd_limit <= 0:
        return CEILING
    return max(FLOOR, min(CEILING, fd_limit - FD_RESERVE))


def initial(fixed: int | None, *, now: float, ceiling: int = CEILING) -> Window:
    if fixed is not None:
        return Window(limit=fixed, floor=fixed, ceiling=fixed, fixed=True, since=now)
    ceiling = max(ceiling, 1)
    floor = min(FLOOR, ceiling)
    return Window(limit=min(INITIAL, ceiling), floor=floor, ceiling=ceiling, since=now)


def sampled(w: Window, lag_s: float, in_flight: int, now: float) -> Window:
    """One sample of the loop's lag and the requests in flight; at the end
    of an interval, the window resized."""
    lags = (*w.lags, max(lag_s, 0.0))
    peak = max(w.peak, in_flight)
    if now - w.since < DECIDE_S:
        return replace(w, lags=lags, peak=peak)
    lag = statistics.median(lags)
    limit = w.limit
    saturated = lag > LAG_BUSY_S
    ramping = w.ramping and lag < LAG_LOW_S
    if not w.fixed:
        if lag > LAG_HIGH_S:
            limit = max(w.floor, int(limit * SHRINK))
        elif lag < LAG_LOW_S and peak >= FULL_SHARE * limit:
            limit = min(w.ceiling, int(limit * (RAMP_GROW if ramping else GROW)) + 1)
    return replace(w, limit=limit, saturated=saturated, ramping=ramping, since=now, lags=(), peak=0)
