"""Shares of an endpoint's limits across workers that come and go (core/shares.py)."""

from __future__ import annotations

from dataclasses import dataclass

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dispatcher.core.shares import Members, View, bucket, may_apply, share_of, split


@given(st.integers(0, 10_000), st.integers(1, 64), st.integers(0, 10**9))
def test_shares_add_up_exactly(total: int, workers: int, salt: int) -> None:
    shares = [split(total, workers, i, salt) for i in range(workers)]
    assert sum(shares) == total
    assert max(shares) - min(shares) <= 1


@pytest.mark.parametrize(
    ("live", "applied", "grant"),
    [
        # Alone, and applied: the whole.
        (("a",), {"a": ("a",)}, 10),
        # Just registered: nothing until it has applied a membership itself.
        (("a",), {"a": None}, 0),
        # A newcomer while the old worker still applies its solo share.
        (("a", "b"), {"a": ("a",), "b": ("a", "b")}, 0),
        # The old worker shrank to its half: the newcomer takes the rest.
        (("a", "b"), {"a": ("a", "b"), "b": ("a", "b")}, 5),
        # A third joined; b (us) applied it, a not yet: a holds 5, we 3 of 10.
        (("a", "b", "c"), {"a": ("a", "b"), "b": ("a", "b", "c"), "c": None}, 3),
        # c left (or died): we may grow only after applying the smaller membership.
        (("a", "b"), {"a": ("a", "b", "c"), "b": ("a", "b", "c")}, 3),
        (("a", "b"), {"a": ("a", "b", "c"), "b": ("a", "b")}, 5),
    ],
)
def test_grant(live: Members, applied: dict[str, Members | None], grant: int) -> None:
    assert View(me="b" if "b" in live else "a", live=live, applied=applied).grant(10, 0) == grant


def test_a_membership_without_the_worker_counts_as_the_whole() -> None:
    assert share_of("x", ("a", "b"), 10, 0) == 10
    assert share_of("x", None, 10, 0) == 0


def test_may_apply_waits_for_held_rows_within_the_share() -> None:
    view = View(me="a", live=("a", "b"), applied={"a": ("a",), "b": None})
    assert may_apply(view, [(10, 0, 5), (1, 7, 0)])
    assert not may_apply(view, [(10, 0, 6)])


def test_buckets_follow_the_grant_and_add_up_to_the_burst() -> None:
    assert bucket(0, 10, 50.0, 50) is None
    assert bucket(5, 10, None, 50) is None
    assert bucket(4, 10, 50.0, 50) == (20, 20.0)
    assert bucket(3, 10, 50.0, 1) == (1, 15.0)  # never below one token


# ------------------------------------------------------------ interleavings


@dataclass
class _Worker:
    applied: Members | None = None  # as published
    pending: Members | None = None  # to publish with the next heartbeat
    held: int = 0
    grant: int = 0
    registered: bool = False
    live: bool = False


TOTAL, SALT = 10, 3
NAMES = "abcd"

_steps = st.lists(
    st.tuples(
        st.sampled_from(["beat", "claim", "drain", "die", "leave"]),
        st.integers(0, len(NAMES) - 1),
        st.integers(1, TOTAL),
    ),
    max_size=80,
)


def _beat(ws: dict[str, _Worker], name: str) -> None:
    """One heartbeat: publish, then read everyone in one snapshot; shrink at
    once, and say applied next time only when what is held is within it."""
    w = ws[name]
    w.registered = w.live = True
    w.applied = w.pending
    live = tuple(sorted(n for n, x in ws.items() if x.live))
    view = View(me=name, live=live, applied={n: ws[n].applied for n in live})
    w.grant = view.grant(TOTAL, SALT)
    if may_apply(view, [(TOTAL, SALT, w.held)]):
        w.pending = live


@settings(max_examples=1000, deadline=None)
@given(_steps)
def test_grants_in_use_never_add_up_past_the_limit(steps: list[tuple[str, int, int]]) -> None:
    ws = {n: _Worker() for n in NAMES}
    for kind, i, k in steps:
        name = NAMES[i]
        w = ws[name]
        if kind == "beat":
            _beat(ws, name)
        elif kind == "claim" and w.live:
            w.held = max(w.held, min(w.grant, w.held + k))
        elif kind == "drain":
            w.held = max(0, w.held - k)
        elif kind in ("die", "leave") and w.registered:
            # Dead (heartbeat expired) or gone: it sends nothing more, and it
            # starts again as a newcomer.
            ws[name] = _Worker()
        assert sum(x.held for x in ws.values()) <= TOTAL
    # Liveness: once nobody comes or goes, four heartbeats each and every
    # worker has its full share: the first shrinks the grants, what is held
    # drains by the second (which then says applied), the third publishes
    # it, the fourth reads everyone's.
    running = [n for n, x in ws.items() if x.live]
    for _ in range(4):
        for n in running:
            ws[n].held = min(ws[n].held, ws[n].grant)
            _beat(ws, n)
    if running:
        live = tuple(sorted(running))
        for n in running:
            assert ws[n].grant == share_of(n, live, TOTAL, SALT)
        assert sum(ws[n].grant for n in running) == TOTAL
