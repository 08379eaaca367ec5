"""The width of a time-partitioned table's partitions for its retention
(core.retention.partition_width_s): the widest of a day, an hour, five
minutes that is at most a quarter of the retention, so a partition dropped
whole keeps no row more than a quarter past it."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from dispatcher.core.retention import (
    DAYS_AHEAD,
    NARROW_AHEAD,
    PARTITION_WIDTHS_S,
    partition_width_s,
    partitions_ahead,
)


def test_forever_and_the_defaults_are_a_day() -> None:
    assert partition_width_s(None) == 86_400
    for days in (4, 7, 30, 90):
        assert partition_width_s(days * 86_400.0) == 86_400


def test_short_retentions_narrow_the_partitions() -> None:
    assert partition_width_s(4 * 86_400.0 - 1) == 3_600
    assert partition_width_s(4 * 3_600.0) == 3_600
    assert partition_width_s(3_600.0) == 300  # the retention tests' hour
    assert partition_width_s(600.0) == 300  # the soak's 10 minutes: the floor


@given(st.floats(min_value=1.0, max_value=1e9, allow_nan=False))
def test_the_widest_width_within_a_quarter(keep_s: float) -> None:
    width = partition_width_s(keep_s)
    assert width in PARTITION_WIDTHS_S
    fitting = [w for w in PARTITION_WIDTHS_S if w <= keep_s / 4]
    assert width == (max(fitting) if fitting else min(PARTITION_WIDTHS_S))


@given(st.sampled_from(PARTITION_WIDTHS_S))
def test_partitions_made_ahead_cover_at_least_an_hour(width: int) -> None:
    ahead = partitions_ahead(width)
    assert ahead in (DAYS_AHEAD, NARROW_AHEAD)
    assert ahead * width >= 3_600
