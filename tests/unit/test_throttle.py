"""Unit tests for dispatcher.core.throttle, the pure failed-credential throttle.

SPEC: "Failed credentials (bearer tokens, dashboard sign-in, portal codes)
are throttled per client address: past 20 failures in a minute the answer
is 429 with `Retry-After`, and a correct credential from another address is
unaffected."
"""

from __future__ import annotations

import itertools
import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dispatcher.core.throttle import FailureThrottle, address_key
from dispatcher.settings import Settings

PROPS = settings(max_examples=300, deadline=None, database=None)
T0 = 1000.0


def test_twenty_failures_then_locked_out_until_the_oldest_leaves_the_window() -> None:
    t = FailureThrottle(20)
    for i in range(20):
        assert t.retry_after("a", T0 + i) is None, i
        t.failed("a", T0 + i)
    # The 21st attempt, one second after the 20th failure.
    assert t.retry_after("a", T0 + 20) == 40
    assert t.retry_after("a", T0 + 59.5) == 1
    # The first failure leaves the window: one more try, then locked again.
    assert t.retry_after("a", T0 + 60) is None
    t.failed("a", T0 + 60)
    assert t.retry_after("a", T0 + 60) == 1


def test_other_keys_are_unaffected() -> None:
    t = FailureThrottle(3)
    for i in range(3):
        t.failed("a", T0 + i)
    assert t.retry_after("a", T0 + 3) is not None
    assert t.retry_after("b", T0 + 3) is None


@pytest.mark.parametrize(
    ("now", "expected"),
    [(T0, 60), (T0 + 0.001, 60), (T0 + 0.999, 60), (T0 + 1, 59), (T0 + 59.999, 1), (T0 + 60, None)],
)
def test_retry_after_is_whole_seconds_rounded_up(now: float, expected: int | None) -> None:
    t = FailureThrottle(1)
    t.failed("a", T0)
    assert t.retry_after("a", now) == expected


def test_limit_zero_is_off() -> None:
    t = FailureThrottle(0)
    for i in range(1000):
        t.failed("a", T0 + i / 1000)
    assert t.retry_after("a", T0 + 1) is None
    assert len(t) == 0


def test_forgets_a_key_whose_failures_left_the_window() -> None:
    t = FailureThrottle(5)
    t.failed("a", T0)
    assert len(t) == 1
    assert t.retry_after("a", T0 + 61) is None
    assert len(t) == 0


def test_keys_are_capped_and_the_longest_quiet_goes_first() -> None:
    t = FailureThrottle(1, max_keys=3)
    for i, key in enumerate("abc"):
        t.failed(key, T0 + i)
    t.failed("a", T0 + 3)  # "a" is recent again: "b" is now the longest quiet
    t.failed("d", T0 + 4)
    assert len(t) == 3
    assert t.retry_after("b", T0 + 5) is None
    for key in "acd":
        assert t.retry_after(key, T0 + 5) is not None, key


@pytest.mark.parametrize(
    ("limit", "window_s", "max_keys"), [(-1, 60.0, 10), (1, 0.0, 10), (1, 60.0, 0)]
)
def test_refuses_nonsense(limit: int, window_s: float, max_keys: int) -> None:
    with pytest.raises(ValueError):
        FailureThrottle(limit, window_s=window_s, max_keys=max_keys)


@pytest.mark.parametrize(
    ("remote", "key"),
    [
        ("203.0.113.7", "203.0.113.7"),
        ("::ffff:203.0.113.7", "203.0.113.7"),
        ("2001:db8:1:2:3:4:5:6", "2001:db8:1:2::/64"),
        ("2001:db8:1:2:ffff::1", "2001:db8:1:2::/64"),
        ("fe80::1%eth0", "fe80::/64"),
        ("::1", "::/64"),
        (None, ""),
        ("", ""),
        ("/tmp/socket", "/tmp/socket"),
    ],
)
def test_address_key(remote: str | None, key: str) -> None:
    assert address_key(remote) == key


# A model to check against: every failure kept, counted in the window.
Step = tuple[int, float, bool]  # key index, seconds since the last step, fails?


@PROPS
@given(
    limit=st.integers(1, 6),
    max_keys=st.integers(1, 4),
    steps=st.lists(
        st.tuples(st.integers(0, 5), st.floats(0, 40, allow_nan=False), st.booleans()),
        max_size=80,
    ),
)
def test_matches_a_model_of_the_sliding_window(
    limit: int, max_keys: int, steps: list[Step]
) -> None:
    t = FailureThrottle(limit, window_s=60.0, max_keys=max_keys)
    failures: dict[str, list[float]] = {}
    last_failed: dict[str, tuple[float, int]] = {}  # time, then order (ties at one time)
    order = itertools.count()
    now = T0
    for index, gap, fails in steps:
        now += gap
        key = f"k{index}"
        recent = [x for x in failures.get(key, []) if x > now - 60.0]
        model = None
        if len(recent) >= limit:
            model = min(max(1, math.ceil(recent[-limit] + 60.0 - now)), 60)
        got = t.retry_after(key, now)
        assert got == model
        assert got is None or 1 <= got <= 60
        if got is None and fails:
            t.failed(key, now)
            failures.setdefault(key, []).append(now)
            last_failed[key] = (now, next(order))
            # The model's eviction: beyond max_keys live keys, the one whose
            # last failure is the oldest is forgotten.
            live = [k for k, ts in failures.items() if any(x > now - 60.0 for x in ts)]
            while len(live) > max_keys:
                gone = min(live, key=lambda k: last_failed[k])
                failures.pop(gone)
                live.remove(gone)
        assert len(t) <= max_keys


@pytest.mark.parametrize(("raw", "limit"), [(None, 20), ("5", 5), ("0", 0)])
def test_the_limit_is_a_setting(raw: str | None, limit: int) -> None:
    env = {} if raw is None else {"DISPATCHER_AUTH_FAILURES_PER_MIN": raw}
    assert Settings.from_env(env).auth_failures_per_min == limit
