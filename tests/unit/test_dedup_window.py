"""The dedup window the SQL enqueue keeps: DISPATCHER_DEDUP_WINDOW_S, cut to
the shortest retention of final rows (an id whose row is gone is new again)."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from dispatcher.core.retention import DAY_S, Retention

seconds = st.floats(min_value=0, max_value=400 * DAY_S, allow_nan=False)


def test_the_defaults_keep_the_window() -> None:
    assert Retention().dedup_window(DAY_S) == DAY_S


def test_a_shorter_final_retention_cuts_it() -> None:
    assert Retention(delivered_s=600).dedup_window(DAY_S) == 600
    assert Retention(cancelled_s=60, dead_s=30).dedup_window(3600) == 30


@given(window=st.floats(min_value=1, max_value=400 * DAY_S), delivered=seconds, dead=seconds,
       cancelled=seconds)  # fmt: skip
def test_never_longer_than_a_kept_row_nor_the_setting(
    window: float, delivered: float, dead: float, cancelled: float
) -> None:
    r = Retention(delivered_s=delivered, dead_s=dead, cancelled_s=cancelled)
    got = r.dedup_window(window)
    assert got <= window
    assert all(got <= s for s in (delivered, dead, cancelled) if s > 0)  # 0 keeps forever
    assert got in (window, *(s for s in (delivered, dead, cancelled) if s > 0))
