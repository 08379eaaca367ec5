"""The process-wide window as a pure state machine: it grows while the loop
has headroom and the window is what holds the rate back, holds while the
process is busy, and shrinks only when requests queue in the process."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from dispatcher.core import window
from dispatcher.core.window import (
    CEILING,
    DECIDE_S,
    FLOOR,
    GROW,
    INITIAL,
    LAG_BUSY_S,
    LAG_HIGH_S,
    LAG_LOW_S,
    SAMPLE_S,
    Window,
    ceiling_for,
    initial,
    sampled,
)


def _interval(w: Window, lag_s: float, in_flight: int, start: float) -> tuple[Window, float]:
    """One decision interval of samples; returns the window and the time after it."""
    t = start
    n = int(DECIDE_S / SAMPLE_S)
    for _ in range(n):
        t += SAMPLE_S
        w = sampled(w, lag_s, in_flight, t)
    return w, t + 1e-6


def _run(w: Window, lag_s: float, in_flight: int | None, intervals: int) -> Window:
    t = w.since
    for _ in range(intervals):
        w, t = _interval(w, lag_s, w.limit if in_flight is None else in_flight, t)
    return w


def test_starts_at_the_old_default_within_its_ceiling() -> None:
    assert initial(None, now=0.0).limit == INITIAL
    assert initial(None, now=0.0, ceiling=300).limit == 300


def test_a_full_window_on_an_idle_loop_grows_to_the_ceiling() -> None:
    w = _run(initial(None, now=0.0), 0.001, None, 40)
    assert w.limit == CEILING and not w.saturated


def _decide(w: Window, lag_s: float) -> Window:
    """Samples a full window at this lag until the next decision."""
    since, t = w.since, w.since
    while w.since == since:
        t += SAMPLE_S
        w = sampled(w, lag_s, w.limit, t)
    return w


def test_a_ramping_window_doubles_until_the_loop_is_first_busy() -> None:
    # Against slow receivers every interval below what they allow is lost
    # rate: the window doubles while the loop keeps up...
    w = _decide(initial(None, now=0.0, ceiling=100_000), 0.001)
    assert w.limit == 2 * INITIAL + 1 and w.ramping
    # ...and, once the loop has been busy, grows by GROW only.
    w = _decide(w, (LAG_LOW_S + LAG_BUSY_S) / 2)
    assert not w.ramping and w.limit == 2 * INITIAL + 1
    w = _decide(w, 0.001)
    assert w.limit == int((2 * INITIAL + 1) * GROW) + 1 and not w.ramping


def test_a_shrink_ends_the_ramp() -> None:
    w = _decide(initial(None, now=0.0), LAG_HIGH_S * 2)
    assert w.limit < INITIAL and not w.ramping


def test_a_window_that_is_not_full_does_not_grow() -> None:
    w = _run(initial(None, now=0.0), 0.001, 100, 20)
    assert w.limit == INITIAL


def test_a_busy_loop_holds_the_window_and_says_so() -> None:
    # CPU-bound: rate x latency still has to be in flight, so no cut.
    w = _run(initial(None, now=0.0), (LAG_BUSY_S + LAG_HIGH_S) / 2, None, 20)
    assert w.limit == INITIAL and w.saturated


def test_a_loop_far_behind_shrinks_to_the_floor() -> None:
    w = _run(initial(None, now=0.0), LAG_HIGH_S * 2, None, 60)
    assert w.limit == FLOOR and w.saturated


def test_one_slow_sample_is_averaged_out() -> None:
    w = initial(None, now=0.0)
    w = sampled(w, 0.4, w.limit, 0.01)  # one long pause (a GC, a big claim)
    w, _ = _interval(w, 0.0, w.limit, 0.01)
    assert w.limit > INITIAL and not w.saturated


def test_a_fixed_window_never_moves() -> None:
    for lag in (0.0, LAG_HIGH_S * 3):
        w = _run(initial(256, now=0.0), lag, None, 30)
        assert w.limit == 256 and w.fixed


@pytest.mark.parametrize(
    ("fds", "expected"), [(None, CEILING), (1_000_000, CEILING), (1024, 768), (100, FLOOR)]
)
def test_the_ceiling_leaves_descriptors_for_the_rest(fds: int | None, expected: int) -> None:
    assert ceiling_for(fds) == expected


@given(
    st.lists(
        st.tuples(st.floats(0, 1.0), st.integers(0, 20_000), st.floats(0.001, 1.0)),
        max_size=300,
    )
)
def test_the_window_stays_between_floor_and_ceiling(
    steps: list[tuple[float, int, float]],
) -> None:
    w = initial(None, now=0.0)
    t = 0.0
    for lag, in_flight, dt in steps:
        t += dt
        w = window.sampled(w, lag, in_flight, t)
        assert FLOOR <= w.limit <= CEILING
