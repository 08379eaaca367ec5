"""The benchmark receiver's draws: lognormal delays with the asked median
and p99, fault mixes in their shares, and the mix syntax."""

from __future__ import annotations

import pytest

from benchmarks.receiver_mix import Behaviour, parse_lognormal, parse_mix, parse_uniform


def test_lognormal_delays_have_the_asked_median_and_p99() -> None:
    b = Behaviour(lognormal_ms=(80.0, 1500.0), seed=1)
    draws = sorted(b.delay() for _ in range(50_000))
    assert draws[len(draws) // 2] == pytest.approx(0.080, rel=0.05)
    assert draws[int(len(draws) * 0.99)] == pytest.approx(1.5, rel=0.12)


def test_a_fixed_latency_is_kept() -> None:
    assert Behaviour(latency_s=0.2).delay() == 0.2


def test_faults_come_in_their_shares() -> None:
    b = Behaviour(faults=parse_mix("hang=0.01,5xx=0.02,429=0.005"), seed=3)
    n = 200_000
    seen: dict[str | None, int] = {}
    for _ in range(n):
        k = b.fault()
        seen[k] = seen.get(k, 0) + 1
    assert seen["hang"] / n == pytest.approx(0.01, rel=0.1)
    assert seen["5xx"] / n == pytest.approx(0.02, rel=0.1)
    assert seen["429"] / n == pytest.approx(0.005, rel=0.15)
    assert {b.error_status() for _ in range(100)} == {500, 502, 504}


@pytest.mark.parametrize("bad", ["hang", "teapot=0.1", "hang=x", "hang=1.5", "hang=0.6,500=0.6"])
def test_bad_mixes_are_refused(bad: str) -> None:
    with pytest.raises(ValueError):
        parse_mix(bad)


@pytest.mark.parametrize("bad", ["80", "80:x", "0:10", "100:50"])
def test_bad_lognormals_are_refused(bad: str) -> None:
    with pytest.raises(ValueError):
        parse_lognormal(bad)


def test_uniform_delays_cover_their_range_evenly() -> None:
    b = Behaviour(uniform_ms=parse_uniform("50:1000"), seed=2)
    draws = [b.delay() for _ in range(20_000)]
    assert 0.05 <= min(draws) < 0.06 and 0.99 < max(draws) <= 1.0
    assert sum(draws) / len(draws) == pytest.approx(0.525, rel=0.02)


@pytest.mark.parametrize("bad", ["50", "50:x", "100:50", "-1:10", "0:700000"])
def test_bad_uniform_ranges_are_refused(bad: str) -> None:
    with pytest.raises(ValueError):
        parse_uniform(bad)
