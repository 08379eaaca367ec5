"""core.failover: which outcomes are kept, for how long, and which are
written again on another server."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from dispatcher.core import failover
from dispatcher.core.failover import Rewrite, Written
from dispatcher.core.models import RANGES, Outcome, Status
from tests.unit.strategies import outcomes


def out(i: int, status: Status = Status.DELIVERED, *, spent: bool = True, attempt: int = 0,
        gone: bool = False) -> Outcome:  # fmt: skip
    return Outcome(i, 1, status, 0.0, spent, 200, 5, None, gone, None, attempt)


@pytest.mark.parametrize(
    ("outcome", "kept"),
    [
        (out(1), True),
        (out(1, Status.FAILED), True),
        (out(1, Status.DEAD_LETTER), True),
        (out(1, Status.DEAD_LETTER, spent=False), True),  # unsendable: ends the row
        (out(1, Status.PENDING, spent=False), False),  # handed back unsent
        (out(1, Status.PENDING, spent=True), True),  # a retry (stored as failed)
        (out(1, attempt=-1), False),  # no attempt known
    ],
)
def test_what_is_kept(outcome: Outcome, kept: bool) -> None:
    assert failover.worth_keeping(outcome) is kept


def test_kept_outcomes_drop_what_the_rewrite_never_writes() -> None:
    recorded = out(1)._replace(detail=b'{"response_excerpt": "' + b"x" * 4000 + b'"}',
                               timing=(0.001, 0.002, None, 0.003))  # fmt: skip
    (k,) = failover.kept([recorded, out(2, Status.PENDING, spent=False)])
    assert k.detail is None and k.timing is None
    # Everything rewrite_outcomes and the lost flushes' announcements use stays.
    assert k._replace(detail=recorded.detail, timing=recorded.timing) == recorded
    bare = out(3)
    assert failover.kept([bare]) == (bare,)


@given(outcomes(30))
def test_kept_is_each_outcome_worth_keeping_stripped(outcomes: list[Outcome]) -> None:
    """Whichever way a flush is kept (all spent: by map, in C; else one by
    one), the same outcomes, in order, without their record and timings."""
    kept = failover.kept(outcomes)
    want = [o._replace(detail=None, timing=None) for o in outcomes if failover.worth_keeping(o)]
    assert list(kept) == want
    assert all(type(k) is Outcome for k in kept)


def test_kept_at_least_the_longest_lease() -> None:
    assert failover.keep_s(30.0) >= RANGES["timeout_ms"][1] / 1000 + 30.0


def _w(at: float, n: int, server: str | None = "a") -> Written:
    return Written(server, at, tuple(out(i) for i in range(n)))


@pytest.mark.parametrize(
    ("ats", "sizes", "now", "keep_s", "keep_max", "dropped"),
    [
        ([0, 5, 9], [1, 1, 1], 10, 20, 100, 0),
        ([0, 5, 9], [1, 1, 1], 10, 6, 100, 1),  # the first is older than keep_s
        ([0, 5, 9], [1, 1, 1], 100, 6, 100, 3),
        ([0, 5, 9], [50, 40, 30], 10, 20, 100, 1),  # 120 > 100: the oldest goes
        ([0, 5, 9], [50, 40, 30], 10, 20, 30, 2),
        ([], [], 10, 20, 100, 0),
    ],
)
def test_expired(
    ats: list[float], sizes: list[int], now: float, keep_s: float, keep_max: int, dropped: int
) -> None:
    written = [_w(a, n) for a, n in zip(ats, sizes, strict=True)]
    total = sum(sizes)
    got = failover.expired(written, total=total, now=now, keep_s=keep_s, keep_max=keep_max)
    assert got == dropped


@given(st.lists(st.tuples(st.floats(0, 100), st.integers(1, 50)), max_size=20),
       st.integers(1, 200))  # fmt: skip
def test_expired_keeps_at_most_keep_max(batches: list[tuple[float, int]], keep_max: int) -> None:
    written = [_w(a, n) for a, n in sorted(batches)]
    total = sum(n for _, n in batches)
    n = failover.expired(written, total=total, now=100.0, keep_s=1e9, keep_max=keep_max)
    rest = written[n:]
    assert sum(len(w.outcomes) for w in rest) <= keep_max
    # No more than needed: one more batch would be over the bound.
    if n:
        assert sum(len(w.outcomes) for w in written[n - 1 :]) > keep_max


def test_to_rewrite_takes_what_other_servers_acknowledged_in_order() -> None:
    written = [
        Written("a", 1.0, (out(1), out(2))),
        Written("b", 2.0, (out(3),)),
        Written(None, 3.0, (out(1, attempt=1),)),
    ]
    got = failover.to_rewrite(written, server="b", now=4.0)
    assert got == [Rewrite(out(1), 3.0), Rewrite(out(2), 3.0), Rewrite(out(1, attempt=1), 1.0)]
    assert failover.to_rewrite(written[1:2], server="b", now=4.0) == []


def test_applied_is_each_changed_rows_last_outcome() -> None:
    rewrites = [
        Rewrite(out(1, Status.FAILED, attempt=0), 2.0),
        Rewrite(out(1, Status.DEAD_LETTER, attempt=1), 1.0),
        Rewrite(out(2, Status.DEAD_LETTER, attempt=3), 1.0),
        Rewrite(out(3), 1.0),
    ]
    # Row 2 held a newer attempt than the outcome's: not changed by it.
    got = failover.applied(rewrites, {1: 0, 2: 4})
    assert got == [out(1, Status.DEAD_LETTER, attempt=1)]


def test_the_rewriter_keeps_a_bounded_window() -> None:
    from dispatcher.worker.rewriter import Rewriter

    now = [0.0]
    r = Rewriter(worker="w", keep_s=10.0, keep_max=250, clock=lambda: now[0])
    for t in range(20):
        now[0] = float(t)
        r.wrote([out(t * 100 + i) for i in range(100)] + [out(-1, Status.PENDING, spent=False)])
    assert r.kept == 200  # the count bound: the two newest flushes
    now[0] = 40.0
    r.wrote([out(1)])
    assert r.kept == 1  # the time bound: the older flushes are gone
