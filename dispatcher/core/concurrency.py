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
  halve the limit; recent latency (a moving average, `RECENT_WEIGHT`) over
  twice the baseline (the mean of the first `BASELINE_SAMPLES` answers,
  then a moving average ten times slower) trims it by 10% and moves the
  baseline halfway up: a trend, not one slow answer. A receiver whose
  answers take anything from 50 to 1,000 ms is not slowing down when one
  takes 900: judged one answer at a time, such a receiver was held at about
  75 of its 312 (now: 312, no trim in 100,000 answers), and a lognormal one
  (p50 80 ms, p99 1,500 ms) at 63 (now about 120); and
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
BASELINE_SAMPLES = 50  # the baseline: the plain mean of this many answers,
BASELINE_WEIGHT = 0.005  # then a slow EWMA of all answers
RECENT_WEIGHT = 0.05  # EWMA of the latest answers, held against the baseline
TIMEOUT_WINDOW = 50  # completions judged together, at least
TIMEOUT_SHARE = 0.5  # of them timed out: the endpoint is overloaded


# A value: the functions here return a new one and never change one in
# place. Not frozen all the same: a frozen class sets each of its nine
# fields through object.__setattr__, and most answers make a new Limit
# (the latency averages move): 0.6 against 3.0 µs, per delivery.
@dataclass(kw_only=True, slots=True)
class Limit:
    limit: float
    max_limit: int
    slow_start: bool = True
    baseline_ms: float | None = None
    recent_ms: float | None = None
    learned: int = 0  # answers the baseline has learned from, up to BASELINE_SAMPLES
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
    limit = min(s.limit, float(max_limit))
    if s.slow_start:
        # A limit cut to 1 by a share of nothing (a worker that has just
        # joined holds none until the others have shrunk) starts again
        # where slow start starts, not at 1 (five round trips later).
        limit = max(limit, float(min(max_limit, INITIAL)))
    return replace(s, max_limit=max_limit, limit=limit)


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
    if base is None or s.recent_ms is None:
        return replace(s, limit=min(float(s.max_limit), s.limit + step), baseline_ms=latency_ms,
                       recent_ms=latency_ms, learned=1)  # fmt: skip
    recent = s.recent_ms + RECENT_WEIGHT * (latency_ms - s.recent_ms)
    steady = abs(latency_ms - base) <= 0.25 * base and abs(recent - base) <= 0.25 * base
    if s.limit >= s.max_limit and steady and s.learned >= BASELINE_SAMPLES:
        return s  # at the top and steady: nothing to learn (the common case, kept cheap)
    grown = min(float(s.max_limit), s.limit + step)
    if s.learned < BASELINE_SAMPLES:
        # Still learning: the baseline is the plain mean so far, no trims.
        n = s.learned + 1
        return replace(s, limit=grown, baseline_ms=base + (latency_ms - base) / n,
                       recent_ms=recent, learned=n)  # fmt: skip
    if recent > LATENCY_TOLERANCE * base and recent > base + 50:
        # A trend: trim, and move the baseline halfway to it, so that an
        # endpoint that has simply become slower (but healthy) is trimmed a
        # few times, not ratcheted down to 1.
        trimmed = _decrease(s, 0.9, now)
        if trimmed is s:
            return replace(s, recent_ms=recent)  # trimmed within the last second
        return replace(trimmed, baseline_ms=(base + recent) / 2, recent_ms=recent)
    # Ten times slower than `recent`: a slow spell shows in `recent` against
    # the baseline it started from.
    base += BASELINE_WEIGHT * (latency_ms - base)
    # Every field named, not replace(): this is the line most answers end
    # on, and replace() walks the fields in Python.
    return Limit(limit=grown, max_limit=s.max_limit, slow_start=s.slow_start, baseline_ms=base,
                 recent_ms=recent, learned=s.learned, last_decrease_at=s.last_decrease_at,
                 window_done=s.window_done, window_timeouts=s.window_timeouts)  # fmt: skip


def on_overload(s: Limit, now: float) -> Limit:
    """A timeout, 429 or 503: the endpoint says it has too much."""
    return _decrease(s, 0.5, now)
