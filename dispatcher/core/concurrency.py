"""Adaptive concurrency per endpoint: how many requests may be in flight now.

AIMD with a slow start, driven by what the endpoint shows:

- slow start: from `INITIAL` (32) in flight, +`SLOW_START_STEP` (2) per
  success, so the limit triples every round trip until the first sign of
  trouble: a healthy endpoint reaches 90 % of a maximum of 625 within three
  round trips (1.5 s against a 500 ms receiver; TCP's 4 and +1 took eight,
  4 s, and by Little's law every round trip of ramp is a round trip of lost
  rate). A hanging endpoint has no successes, so it never grows past
  INITIAL: 32 of the process's window at most, until timeouts halve it;
- then additive increase: +1/limit per success (about +1 per round trip)
  while latency holds near its baseline;
- multiplicative decrease: 429 and 503 (the receiver says it has too much)
  halve the limit; latency over twice the baseline trims it by 10%; and
  timeouts halve it only when they are most of what completes: a window of
  completions opens at the first timeout and, once it holds
  max(limit, TIMEOUT_WINDOW) of them, halves the limit if at least
  TIMEOUT_SHARE timed out. A hanging minority (some requests never answer
  while the rest answer at once) is not overload, and cutting the window
  for it would starve the healthy majority. At most one decrease per
  `decrease_interval_s`, so one burst of failures (all sent at the old
  limit) counts once.

A slowing endpoint therefore gets fewer parallel requests before it starts
timing out. Latency measured while this process is saturated (its own
event loop lagging, see window.py) is ours, not the endpoint's: it is not
held against the endpoint. Pure: outcomes and the time come in, a new value goes out.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

INITIAL = 32
SLOW_START_STEP = 2.0
DECREASE_INTERVAL_S = 1.0
LATENCY_TOLERANCE = 2.0
BASELINE_WEIGHT = 0.05  # EWMA of the latency seen while healthy
TIMEOUT_WINDOW = 50  # completions judged together, at least
TIMEOUT_SHARE = 0.5  # of them timed out: the endpoint is overloaded


@dataclass(frozen=True, kw_only=True, slots=True)
class Limit:
    limit: float
    max_limit: int
    slow_start: bool = True
    baseline_ms: float | None = None
    last_decrease_at: float = float("-inf")
    # The open window of completions (0 completions: none open).
    window_done: int = 0
    window_timeouts: int = 0

    @property
    def current(self) -> int:
        return max(1, min(self.max_limit, int(self.limit)))


def initial(max_limit: int) -> Limit:
    return Limit(limit=float(min(max_limit, INITIAL)), max_limit=max_limit)


def resize(s: Limit, max_limit: int) -> Limit:
    return replace(s, max_limit=max_limit, limit=min(s.limit, float(max_limit)))


def _decrease(s: Limit, factor: float, now: float) -> Limit:
    if now - s.last_decrease_at < DECREASE_INTERVAL_S:
        return s
    return replace(s, limit=max(1.0, s.limit * factor), slow_start=False, last_decrease_at=now)


def _judged(s: Limit, timed_out: bool, now: float) -> Limit:
    """Counts one completion in the open window; at its end, decides."""
    done = s.window_done + 1
    timeouts = s.window_timeouts + timed_out
    if done < max(TIMEOUT_WINDOW, s.current):
        return replace(s, window_done=done, window_timeouts=timeouts)
    s = replace(s, window_done=0, window_timeouts=0)
    return _decrease(s, 0.5, now) if timeouts >= TIMEOUT_SHARE * done else s


def on_timeout(s: Limit, now: float) -> Limit:
    """No answer within the timeout: judged with the completions around it."""
    return _judged(s, True, now)


def on_success(s: Limit, latency_ms: float, now: float, *, saturated: bool = False) -> Limit:
    """`saturated`: our own process was the bottleneck when this answer
    came (its event loop lagging), so the latency measured includes our
    queueing: it neither trims the limit nor teaches the baseline."""
    if s.window_done:
        s = _judged(s, False, now)
    base = s.baseline_ms
    step = SLOW_START_STEP if s.slow_start else 1.0 / max(s.limit, 1.0)
    if saturated:
        if s.limit >= s.max_limit:
            return s
        return replace(s, limit=min(float(s.max_limit), s.limit + step))
    if base is None:
        return replace(s, limit=min(float(s.max_limit), s.limit + step), baseline_ms=latency_ms)
    learned = base + BASELINE_WEIGHT * (latency_ms - base)
    if latency_ms > LATENCY_TOLERANCE * base and latency_ms > base + 50:
        # Trim, and let the baseline follow: an endpoint that has simply
        # become slower (but healthy) must not be ratcheted down to 1.
        return replace(_decrease(s, 0.9, now), baseline_ms=learned)
    if s.limit >= s.max_limit and abs(latency_ms - base) <= 0.25 * base:
        return s  # at the top and steady: nothing to learn (the common case, kept cheap)
    return replace(s, limit=min(float(s.max_limit), s.limit + step), baseline_ms=learned)


def on_overload(s: Limit, now: float) -> Limit:
    """A timeout, 429 or 503: the endpoint says it has too much."""
    return _decrease(s, 0.5, now)
