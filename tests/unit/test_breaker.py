"""Unit tests for dispatcher.core.breaker, the pure circuit breaker state machine.

SPEC: closed -> open after `failure_threshold` (default 10) consecutive
failures; open for `cooldown_seconds` (300), then half_open lets exactly one
probe through; probe success -> closed, probe failure -> open with the
cooldown doubled, capped at 3600 s. Endpoints whose p95 is over 5 s get a
lower threshold.
"""

from __future__ import annotations

from dataclasses import dataclass

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dispatcher.core.breaker import (
    MAX_COOLDOWN_S,
    SLOW_P95_MS,
    Breaker,
    BreakerState,
    Transition,
    admits,
    effective_threshold,
    fold,
    half_open,
    on_failure,
    on_success,
    probe_due,
)

PROPS = settings(max_examples=200, deadline=None, database=None)

BASE = 300.0
THRESHOLD = 10
T0 = 1_700_000_000.0

CLOSED = BreakerState.CLOSED
OPEN = BreakerState.OPEN
HALF_OPEN = BreakerState.HALF_OPEN


def begin_probe(b: Breaker, now: float) -> Breaker:
    """What the store's conditional UPDATE decides, as the pure model: the
    probe is taken once the cooldown ran out, and not before."""
    return half_open(b) if probe_due(b, now) else b


def open_until(b: Breaker) -> float | None:
    if b.state is BreakerState.CLOSED or b.opened_at is None:
        return None
    return b.opened_at + b.cooldown_s


def _open_breaker(now: float = T0, *, cooldown: float = BASE, threshold: int = THRESHOLD):
    b = Breaker(cooldown_s=cooldown)
    for _ in range(threshold):
        b = on_failure(b, now, threshold=threshold)
    assert b.state is OPEN
    return b


# --------------------------------------------------------------------------
# Constants, defaults, thresholds
# --------------------------------------------------------------------------


def test_constants_match_spec() -> None:
    assert MAX_COOLDOWN_S == 3600.0
    assert SLOW_P95_MS == 5000.0


def test_state_values_match_database_contract() -> None:
    assert {s.value for s in BreakerState} == {"closed", "open", "half_open"}


def test_defaults() -> None:
    b = Breaker()
    assert b.state is CLOSED
    assert b.consecutive_failures == 0
    assert b.opened_at is None
    assert b.cooldown_s == 300.0
    assert b.last_failure_at is None
    assert b.last_success_at is None
    assert admits(b)
    assert not probe_due(b, T0)
    assert open_until(b) is None


@pytest.mark.parametrize(
    ("threshold", "p95_ms", "expected"),
    [
        (10, None, 10),
        (10, 0.0, 10),
        (10, 4999.9, 10),
        (10, 5000.0, 10),  # "over 5 s": exactly 5 s is not over
        (10, 5000.1, 5),
        (10, 60_000.0, 5),
        (11, 9000.0, 5),
        (3, 9000.0, 1),
        (2, 9000.0, 1),
        (1, 9000.0, 1),
        (1, None, 1),
        (0, None, 1),
        (-4, None, 1),
        (0, 9000.0, 1),
    ],
)
def test_effective_threshold(threshold: int, p95_ms: float | None, expected: int) -> None:
    assert effective_threshold(threshold, p95_ms) == expected


@PROPS
@given(st.integers(min_value=1, max_value=1000), st.none() | st.floats(0, 1e6))
def test_effective_threshold_properties(threshold: int, p95_ms: float | None) -> None:
    got = effective_threshold(threshold, p95_ms)
    assert 1 <= got <= threshold
    if p95_ms is not None and p95_ms > SLOW_P95_MS:
        assert got < threshold or threshold == 1
    else:
        assert got == threshold


# --------------------------------------------------------------------------
# Closed -> open
# --------------------------------------------------------------------------


def test_opens_exactly_at_threshold() -> None:
    b = Breaker(cooldown_s=BASE)
    for i in range(1, THRESHOLD):
        b = on_failure(b, T0 + i, threshold=THRESHOLD)
        assert b.state is CLOSED
        assert b.consecutive_failures == i
        assert b.last_failure_at == T0 + i
        assert admits(b)
    b = on_failure(b, T0 + 100, threshold=THRESHOLD)
    assert b.state is OPEN
    assert b.consecutive_failures == THRESHOLD
    assert b.opened_at == T0 + 100
    assert b.cooldown_s == BASE
    assert not admits(b)
    assert open_until(b) == T0 + 100 + BASE


def test_success_in_closed_resets_the_run() -> None:
    b = Breaker(cooldown_s=BASE)
    for _ in range(THRESHOLD - 1):
        b = on_failure(b, T0, threshold=THRESHOLD)
    b = on_success(b, T0 + 1, base_cooldown_s=BASE)
    assert b.state is CLOSED
    assert b.consecutive_failures == 0
    assert b.last_success_at == T0 + 1
    assert b.last_failure_at == T0
    for _ in range(THRESHOLD - 1):
        b = on_failure(b, T0 + 2, threshold=THRESHOLD)
    assert b.state is CLOSED


def test_threshold_one_opens_on_first_failure() -> None:
    b = on_failure(Breaker(), T0, threshold=1)
    assert b.state is OPEN
    assert b.opened_at == T0


def test_slow_endpoint_opens_sooner() -> None:
    threshold = effective_threshold(THRESHOLD, 8000.0)
    b = Breaker()
    for _ in range(threshold):
        b = on_failure(b, T0, threshold=threshold)
    assert b.state is OPEN
    assert b.consecutive_failures == THRESHOLD // 2


# --------------------------------------------------------------------------
# Open
# --------------------------------------------------------------------------


def test_open_blocks_until_cooldown_elapsed() -> None:
    b = _open_breaker()
    assert not admits(b)
    assert not probe_due(b, T0)
    assert not probe_due(b, T0 + BASE - 0.001)
    assert begin_probe(b, T0 + BASE - 0.001) == b
    assert probe_due(b, T0 + BASE)
    assert probe_due(b, T0 + BASE + 1e6)


def test_failure_while_open_does_not_extend_or_reopen() -> None:
    b = _open_breaker()
    later = on_failure(b, T0 + 10, threshold=THRESHOLD)
    assert later.state is OPEN
    assert later.opened_at == T0
    assert later.cooldown_s == BASE
    assert later.consecutive_failures == THRESHOLD + 1
    assert later.last_failure_at == T0 + 10


def test_success_while_open_does_not_close() -> None:
    # A request that started before the breaker opened proves little.
    b = _open_breaker()
    later = on_success(b, T0 + 5, base_cooldown_s=BASE)
    assert later.state is OPEN
    assert later.opened_at == T0
    assert later.cooldown_s == BASE
    assert later.consecutive_failures == b.consecutive_failures
    assert later.last_success_at == T0 + 5


def test_open_breaker_without_opened_at_is_never_due() -> None:
    b = Breaker(state=OPEN, opened_at=None)
    assert not probe_due(b, T0 + 1e9)
    assert begin_probe(b, T0 + 1e9) == b
    assert open_until(b) is None


# --------------------------------------------------------------------------
# Half-open and the probe
# --------------------------------------------------------------------------


def test_exactly_one_probe() -> None:
    b = _open_breaker()
    probing = begin_probe(b, T0 + BASE)
    assert probing.state is HALF_OPEN
    assert probing.opened_at == T0
    assert probing.cooldown_s == BASE
    # Ordinary traffic still waits while the probe is out.
    assert not admits(probing)
    # A second worker asking for a probe gets nothing new.
    assert not probe_due(probing, T0 + BASE + 1)
    assert begin_probe(probing, T0 + BASE + 1) == probing


def test_probe_success_closes_and_resets_cooldown() -> None:
    b = _open_breaker()
    b = begin_probe(b, T0 + BASE)
    b = on_failure(b, T0 + BASE, threshold=THRESHOLD)  # cooldown 600
    b = begin_probe(b, T0 + BASE + 600)
    assert b.state is HALF_OPEN
    closed = on_success(b, T0 + 2000, base_cooldown_s=BASE)
    assert closed.state is CLOSED
    assert closed.consecutive_failures == 0
    assert closed.opened_at is None
    assert closed.cooldown_s == BASE
    assert closed.last_success_at == T0 + 2000
    assert admits(closed)
    assert open_until(closed) is None


def test_probe_success_takes_the_endpoint_base_cooldown() -> None:
    b = begin_probe(_open_breaker(cooldown=BASE), T0 + BASE)
    closed = on_success(b, T0 + BASE, base_cooldown_s=45.0)
    assert closed.cooldown_s == 45.0


@pytest.mark.parametrize(
    ("base", "expected"),
    [
        (300.0, [600.0, 1200.0, 2400.0, 3600.0, 3600.0, 3600.0]),
        (60.0, [120.0, 240.0, 480.0, 960.0, 1920.0, 3600.0, 3600.0]),
        (1.0, [2.0, 4.0, 8.0, 16.0]),
        (2000.0, [3600.0, 3600.0]),
        (3600.0, [3600.0, 3600.0]),
    ],
)
def test_probe_failure_doubles_cooldown_capped(base: float, expected: list[float]) -> None:
    now = T0
    b = _open_breaker(now, cooldown=base)
    for want in expected:
        now = b.opened_at + b.cooldown_s  # type: ignore[operator]
        b = begin_probe(b, now)
        assert b.state is HALF_OPEN
        now += 0.5
        b = on_failure(b, now, threshold=THRESHOLD)
        assert b.state is OPEN
        assert b.opened_at == now
        assert b.cooldown_s == want
        assert b.last_failure_at == now
        assert open_until(b) == now + want
        assert not probe_due(b, now + want - 0.001)
        assert probe_due(b, now + want)


def test_probe_failure_reopens_even_below_threshold() -> None:
    b = Breaker(state=HALF_OPEN, consecutive_failures=0, opened_at=T0, cooldown_s=BASE)
    b = on_failure(b, T0 + 400, threshold=1000)
    assert b.state is OPEN
    assert b.opened_at == T0 + 400
    assert b.cooldown_s == 2 * BASE


def test_open_until() -> None:
    assert open_until(Breaker()) is None
    assert open_until(Breaker(state=OPEN, opened_at=T0, cooldown_s=42.0)) == T0 + 42.0
    assert open_until(Breaker(state=HALF_OPEN, opened_at=T0, cooldown_s=42.0)) == T0 + 42.0


def test_functions_do_not_mutate_their_input() -> None:
    b = Breaker(cooldown_s=BASE)
    snapshot = Breaker(cooldown_s=BASE)
    on_failure(b, T0, threshold=1)
    on_success(b, T0, base_cooldown_s=BASE)
    begin_probe(b, T0)
    assert b == snapshot
    with pytest.raises(AttributeError):
        b.state = OPEN  # type: ignore[misc]


# --------------------------------------------------------------------------
# Random event sequences against the SPEC invariants
# --------------------------------------------------------------------------


@dataclass(frozen=True)
class Ev:
    # "success" | "failure" | "advance" | "wait_out" | "probe", and the
    # shorthands "failures" (dt of them), "cycle_ok", "cycle_fail".
    kind: str
    dt: float = 0.0


events = st.one_of(
    st.just(Ev("success")),
    st.just(Ev("failure")),
    st.just(Ev("probe")),
    st.builds(Ev, st.just("advance"), st.floats(min_value=0.0, max_value=8000.0)),
    # Advance the clock to the end of the current cooldown (if any), exactly.
    st.just(Ev("wait_out")),
    # Failures come in runs in real life; make long runs likely.
    st.integers(min_value=1, max_value=12).map(lambda n: Ev("failures", float(n))),
    # A whole probe cycle: wait out the cooldown, take the probe, see its result.
    st.just(Ev("cycle_ok")),
    st.just(Ev("cycle_fail")),
)


def _cap_sequence(base: float) -> set[float]:
    """Every cooldown a breaker with this base may ever hold."""
    values = {base}
    c = base
    for _ in range(64):
        c = min(c * 2, MAX_COOLDOWN_S)
        values.add(c)
    return values


@PROPS
@given(
    seq=st.lists(events, max_size=80),
    threshold=st.integers(min_value=1, max_value=12),
    base=st.floats(min_value=1.0, max_value=3600.0),
    p95_ms=st.none() | st.floats(min_value=0.0, max_value=20_000.0),
)
def test_random_sequences_respect_spec_invariants(
    seq: list[Ev], threshold: int, base: float, p95_ms: float | None
) -> None:
    thr = effective_threshold(threshold, p95_ms)
    allowed_cooldowns = _cap_sequence(base)
    now = T0
    b = Breaker(cooldown_s=base)
    # Failures since the last success that counted (closed or half_open).
    run = 0

    expanded: list[Ev] = []
    for ev in seq:
        if ev.kind == "failures":
            expanded.extend([Ev("failure")] * int(ev.dt))
        elif ev.kind == "cycle_ok":
            expanded.extend([Ev("wait_out"), Ev("probe"), Ev("success")])
        elif ev.kind == "cycle_fail":
            expanded.extend([Ev("wait_out"), Ev("probe"), Ev("failure")])
        else:
            expanded.append(ev)

    for ev in expanded:
        prev = b
        if ev.kind == "advance":
            now += ev.dt
            continue
        if ev.kind == "wait_out":
            until = open_until(prev)
            if until is not None and until > now:
                now = until
            continue
        if ev.kind == "success":
            b = on_success(prev, now, base_cooldown_s=base)
            assert b.last_success_at == now
            assert b.last_failure_at == prev.last_failure_at
            if prev.state is OPEN:
                # Not a probe: nothing changes but the timestamp.
                assert b.state is OPEN
                assert b.opened_at == prev.opened_at
                assert b.cooldown_s == prev.cooldown_s
                assert b.consecutive_failures == prev.consecutive_failures
            else:
                # Success in closed / half_open: closed, run reset, base cooldown.
                assert b.state is CLOSED
                assert b.consecutive_failures == 0
                assert b.opened_at is None
                assert b.cooldown_s == base
                run = 0
        elif ev.kind == "failure":
            b = on_failure(prev, now, threshold=thr)
            run += 1
            assert b.last_failure_at == now
            assert b.last_success_at == prev.last_success_at
            assert b.consecutive_failures == prev.consecutive_failures + 1
            if prev.state is CLOSED:
                # Opens exactly when the run reaches the threshold, never sooner.
                assert b.consecutive_failures == run
                if run >= thr:
                    assert b.state is OPEN
                    assert b.opened_at == now
                    assert b.cooldown_s == prev.cooldown_s
                else:
                    assert b.state is CLOSED
                    assert b == Breaker(
                        state=CLOSED,
                        consecutive_failures=run,
                        opened_at=None,
                        cooldown_s=prev.cooldown_s,
                        last_failure_at=now,
                        last_success_at=prev.last_success_at,
                    )
            elif prev.state is HALF_OPEN:
                # Probe failure: open again, cooldown doubled and capped.
                assert b.state is OPEN
                assert b.opened_at == now
                assert b.cooldown_s == min(prev.cooldown_s * 2, MAX_COOLDOWN_S)
            else:
                # Late failure while open: neither extends nor restarts the cooldown.
                assert b.state is OPEN
                assert b.opened_at == prev.opened_at
                assert b.cooldown_s == prev.cooldown_s
        elif ev.kind == "probe":
            due = probe_due(prev, now)
            b = begin_probe(prev, now)
            if prev.state is OPEN and prev.opened_at is not None:
                assert due == (now >= prev.opened_at + prev.cooldown_s)
            else:
                assert not due
            if due:
                assert b.state is HALF_OPEN
                assert b.opened_at == prev.opened_at
                assert b.cooldown_s == prev.cooldown_s
                assert b.consecutive_failures == prev.consecutive_failures
            else:
                assert b == prev
        else:  # pragma: no cover
            raise AssertionError(ev)

        # Transition rules that hold whatever the event.
        if b.state is not prev.state:
            pair = (prev.state, b.state)
            assert pair in {
                (CLOSED, OPEN),
                (OPEN, HALF_OPEN),
                (HALF_OPEN, OPEN),
                (HALF_OPEN, CLOSED),
            }, pair
            if pair == (CLOSED, OPEN):
                assert ev.kind == "failure"
                assert b.consecutive_failures >= thr
            if pair == (OPEN, HALF_OPEN):
                assert ev.kind == "probe"
                assert prev.opened_at is not None
                assert now >= prev.opened_at + prev.cooldown_s
            if pair == (HALF_OPEN, OPEN):
                assert ev.kind == "failure"
            if pair == (HALF_OPEN, CLOSED):
                assert ev.kind == "success"

        # Invariants of every reachable state.
        assert b.cooldown_s in allowed_cooldowns
        assert b.cooldown_s <= max(base, MAX_COOLDOWN_S)
        assert (b.opened_at is None) == (b.state is CLOSED)
        assert admits(b) == (b.state is CLOSED)
        assert b.consecutive_failures >= 0
        if b.state is CLOSED:
            assert b.consecutive_failures < thr
            assert open_until(b) is None
        else:
            assert b.opened_at is not None
            assert b.opened_at <= now
            assert open_until(b) == b.opened_at + b.cooldown_s
        if b.state is HALF_OPEN:
            # A half-open breaker grants no further probe.
            assert not probe_due(b, now + 1e9)


# --------------------------------------------------------------------------
# fold: the one place transitions are computed
# --------------------------------------------------------------------------


def _step(b: Breaker, ok: bool, now: float, threshold: int) -> Breaker:
    if ok:
        return on_success(b, now, base_cooldown_s=BASE)
    return on_failure(b, now, threshold=threshold)


@PROPS
@given(
    results=st.lists(st.booleans(), max_size=200),
    threshold=st.integers(1, 20),
    start=st.sampled_from([CLOSED, OPEN, HALF_OPEN]),
)
def test_fold_equals_stepwise_and_reports_every_change(
    results: list[bool], threshold: int, start: BreakerState
) -> None:
    b0 = Breaker(state=start, opened_at=T0 if start is not CLOSED else None, cooldown_s=BASE)
    folded, changes = fold(b0, results, T0 + 1, threshold=threshold, base_cooldown_s=BASE)
    b, expected = b0, []
    for ok in results:
        nb = _step(b, ok, T0 + 1, threshold)
        if nb.state is not b.state:
            expected.append(Transition(b.state, nb.state, nb.cooldown_s))
        b = nb
    assert folded == b
    assert changes == expected


@PROPS
@given(
    results=st.lists(st.booleans(), max_size=300),
    threshold=st.integers(1, 20),
)
def test_fold_opens_iff_a_run_of_threshold_failures(results: list[bool], threshold: int) -> None:
    """Scattered failures never open a closed breaker: only `threshold`
    failures in a row (in send order) do, and the first such run does."""
    b, changes = fold(Breaker(), results, T0, threshold=threshold, base_cooldown_s=BASE)
    run, first_open = 0, None
    for i, ok in enumerate(results):
        run = 0 if ok else run + 1
        if run >= threshold:
            first_open = i
            break
    opened = [c for c in changes if c.to_state is OPEN]
    assert bool(opened) == (first_open is not None)
    if first_open is None:
        assert b.state is CLOSED and changes == []
    else:
        assert changes[0] == Transition(CLOSED, OPEN, BASE)
        assert b.state is OPEN  # nothing but a probe closes it again


def test_fold_of_nothing_changes_nothing() -> None:
    b = _open_breaker()
    assert fold(b, [], T0, threshold=THRESHOLD, base_cooldown_s=BASE) == (b, [])


@given(
    st.sampled_from([CLOSED, HALF_OPEN]),
    st.integers(0, 20),
    st.none() | st.floats(0, 1e6),
    st.floats(1, 3600),
    st.none() | st.floats(0, 1e6),
    st.none() | st.floats(0, 1e6),
    st.floats(0, 1e6),
)
def test_a_success_outside_open_is_always_the_same_closed_value(
    state: BreakerState, failures: int, opened_at: float | None, cooldown: float,
    last_failure: float | None, last_success: float | None, now: float,
) -> None:  # fmt: skip
    """A run of successes at one time returns the breaker it was given
    (no new value each): equal to the closed breaker built field by field."""
    b = Breaker(state=state, consecutive_failures=failures, opened_at=opened_at,
                cooldown_s=cooldown, last_failure_at=last_failure,
                last_success_at=last_success)  # fmt: skip
    once = on_success(b, now, base_cooldown_s=BASE)
    assert once == Breaker(state=CLOSED, consecutive_failures=0, opened_at=None, cooldown_s=BASE,
                           last_failure_at=last_failure, last_success_at=now)  # fmt: skip
    assert on_success(once, now, base_cooldown_s=BASE) is once
