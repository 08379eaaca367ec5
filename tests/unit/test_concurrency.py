"""Adaptive concurrency and limit shares as pure state machines."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from dispatcher import concurrency
from dispatcher.concurrency import DECREASE_INTERVAL_S, initial, on_overload, on_success
from dispatcher.gate import split


def test_slow_start_reaches_the_maximum_quickly() -> None:
    s = initial(256)
    for i in range(300):
        s = on_success(s, 2.0, now=i * 0.001)
    assert s.current == 256 and s.slow_start


def test_overload_halves_once_per_interval() -> None:
    s = initial(100)
    for _ in range(100):
        s = on_success(s, 10.0, now=0.0)
    assert s.current == 100
    s = on_overload(s, now=10.0)
    assert s.current == 50 and not s.slow_start
    s = on_overload(s, now=10.0 + DECREASE_INTERVAL_S / 2)  # same burst of failures
    assert s.current == 50
    s = on_overload(s, now=10.0 + DECREASE_INTERVAL_S)
    assert s.current == 25


def test_additive_increase_after_a_decrease() -> None:
    s = on_overload(initial(100), now=0.0)  # 4 -> 2, out of slow start
    before = s.limit
    for _ in range(int(before)):
        s = on_success(s, 10.0, now=5.0)
    assert before + 0.5 < s.limit <= before + 1.01


def test_latency_rise_trims_the_limit() -> None:
    s = initial(50)
    for _ in range(60):
        s = on_success(s, 20.0, now=0.0)
    assert s.current == 50
    s = on_success(s, 500.0, now=3.0)
    assert s.current == 45


events = st.lists(
    st.one_of(
        st.tuples(st.just("ok"), st.floats(0.1, 20_000)),
        st.tuples(st.just("overload"), st.just(0.0)),
        st.tuples(st.just("tick"), st.floats(0.0, 5.0)),
    ),
    max_size=300,
)


@given(st.integers(1, 5000), events)
def test_limit_always_between_1_and_max(max_limit: int, evs: list[tuple[str, float]]) -> None:
    s = initial(max_limit)
    now = 0.0
    for kind, value in evs:
        prev = s
        if kind == "ok":
            s = on_success(s, value, now)
        elif kind == "overload":
            s = on_overload(s, now)
            assert s.limit <= prev.limit
        else:
            now += value
        assert 1 <= s.current <= max_limit
        assert 1.0 <= s.limit <= max_limit
    assert concurrency.resize(s, 1).current == 1


@given(st.integers(0, 10_000), st.integers(1, 64), st.integers(0, 10**9))
def test_shares_add_up_exactly(total: int, workers: int, salt: int) -> None:
    shares = [split(total, workers, i, salt) for i in range(workers)]
    assert sum(shares) == total
    assert max(shares) - min(shares) <= 1
