"""disable_after / disable_within_s as a pure fold."""

from __future__ import annotations

import pytest

from dispatcher.core.autodisable import fold


@pytest.mark.parametrize(
    ("steps", "disabled_at"),
    [
        # (results of one flush, its clock) per step; 3 failures within 10 s.
        ([([False, False, False], 0.0)], 0),
        ([([False, False], 0.0), ([False], 5.0)], 1),
        ([([False, False], 0.0), ([False], 11.0)], None),  # the first is too old
        ([([False, False], 0.0), ([False], 11.0), ([False], 12.0)], None),
        ([([False], 0.0), ([False, False], 11.0), ([False], 12.0)], 2),  # slides
        ([([False, False, True, False], 0.0)], None),  # a success ends the run
        ([([False, False], 0.0), ([True], 1.0), ([False, False], 2.0)], None),
        ([([True, False, False, False], 0.0)], 0),
    ],
)
def test_three_within_ten_seconds(
    steps: list[tuple[list[bool], float]], disabled_at: int | None
) -> None:
    run: tuple[float, ...] = ()
    fired = None
    for i, (results, now) in enumerate(steps):
        run, disable = fold(run, results, now, after=3, within_s=10)
        assert len(run) <= 3
        if disable and fired is None:
            fired = i
    assert fired == disabled_at


def test_a_disable_starts_a_new_run() -> None:
    run, disable = fold((), [False] * 4, 0.0, after=3, within_s=10)
    assert disable and run == (0.0,)


def test_unset_keeps_nothing() -> None:
    assert fold((1.0,), [False] * 50, 2.0, after=None, within_s=None) == ((), False)
