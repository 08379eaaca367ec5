"""Dead-letter pattern classification (pure)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from dispatcher.dlq import classify

H = 3600.0


@pytest.mark.parametrize(
    ("times", "codes", "pattern", "hint"),
    [
        ([0.0] * 5, [401] * 5, "status-code", "credentials"),
        ([i * H * 5 for i in range(5)], [403, 403, 403, 500, None], "status-code", "credentials"),
        ([0.0] * 8, [429] * 8, "status-code", "rate_per_s"),
        ([0.0] * 3, [410] * 3, "status-code", "410"),
        ([0.0] * 3, [404] * 3, "status-code", "404"),
        ([i * 60.0 for i in range(20)], [500] * 20, "cluster", "replay"),
        ([i * 60.0 for i in range(20)], [None] * 20, "cluster", "replay"),
        ([i * 4 * H for i in range(6)], [500] * 6, "gradual", "max_attempts"),
        ([0.0, 10.0], [503, 503], "gradual", "max_attempts"),
        ([i * 60.0 for i in range(9)], [502] * 9, "gradual", "max_attempts"),
        ([], [], "none", "nothing"),
    ],
)
def test_patterns(times: list[float], codes: list[int | None], pattern: str, hint: str) -> None:
    p = classify(times, codes)
    assert p.name == pattern
    assert hint in p.action


def test_408_is_not_a_status_code_pattern() -> None:
    assert classify([0.0] * 12, [408] * 12).name == "cluster"


@given(
    st.lists(
        st.tuples(st.floats(0, 30 * 24 * H), st.one_of(st.none(), st.integers(100, 599))),
        max_size=60,
    )
)
def test_always_one_of_the_patterns(rows: list[tuple[float, int | None]]) -> None:
    p = classify([t for t, _ in rows], [c for _, c in rows])
    assert p.name in ({"none"} if not rows else {"cluster", "status-code", "gradual"})
    assert p.action
