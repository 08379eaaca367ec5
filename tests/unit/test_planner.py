"""Claim planning: a table of budgets in, the rows each pass may claim out."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dispatcher.core.planner import (
    Want,
    counts,
    first_pass,
    interleaved,
    rotated,
    second_pass,
    split,
)


def W(eid: int, rows: int, app: str = "default") -> Want:
    return Want(eid, rows, 31.0, app)


def claim(plan: list[Want], limit: int, due: dict[int, int]) -> dict[int, int]:
    """What claim_batch does with a plan: in order, each endpoint gives up to
    its budget of the rows it has due, until `limit` rows in all."""
    got: dict[int, int] = {}
    for w in plan:
        n = min(w.rows, due.get(w.endpoint_id, 0), limit - sum(got.values()))
        if n > 0:
            got[w.endpoint_id] = got.get(w.endpoint_id, 0) + n
    return got


def both_passes(wants: list[Want], limit: int, due: dict[int, int]) -> dict[int, int]:
    """The engine's two passes over rows `due` per endpoint."""
    first = first_pass(wants, limit)
    got = claim(first, limit, due)
    left = {e: due.get(e, 0) - got.get(e, 0) for e in due}
    room = limit - sum(got.values())
    more = claim(second_pass(wants, first, got, room), room, left)
    return {e: got.get(e, 0) + more.get(e, 0) for e in set(got) | set(more)}


def per_app(wants: list[Want], got: dict[int, int]) -> dict[str, int]:
    out = dict.fromkeys((w.app for w in wants), 0)
    for w in wants:
        out[w.app] += got.get(w.endpoint_id, 0)
    return out


def old_first_pass(wants: list[Want], limit: int) -> list[Want]:
    """The one-level planner this replaced: a rounded-up share each."""
    fair = max(1, -(-limit // len(wants))) if wants else 0
    return [w._replace(rows=min(w.rows, fair)) for w in wants]


@pytest.mark.parametrize(
    ("wants", "limit", "first"),
    [
        ([], 500, []),
        ([W(1, 1000)], 500, [500]),  # one endpoint: the whole batch
        ([W(1, 3)], 500, [3]),  # never more than the gate can start
        ([W(1, 1000), W(2, 1000)], 500, [250, 250]),
        ([W(1, 1000), W(2, 10), W(3, 1000)], 500, [167, 10, 166]),  # parts within 1
        ([W(i, 5) for i in range(1000)], 500, [1] * 1000),  # more endpoints than rows: 1 each
    ],
)
def test_first_pass_gives_each_a_fair_share(
    wants: list[Want], limit: int, first: list[int]
) -> None:
    assert [w.rows for w in first_pass(wants, limit)] == first


def test_applications_share_first_then_their_endpoints() -> None:
    # A's backlog over 50 endpoints, B's one endpoint: half the batch each.
    wants = [W(i, 100, "A") for i in range(50)] + [W(99, 100, "B")]
    first = first_pass(wants, 500)
    assert per_app(wants, {w.endpoint_id: w.rows for w in first}) == {"A": 250, "B": 100}
    assert [w.rows for w in first if w.app == "A"] == [5] * 50
    # B's one want comes second: the LIMIT cannot cut it.
    assert [w.endpoint_id for w in first[:3]] == [0, 99, 1]
    # B wanted less than its part: A's endpoints take the rest in the second pass.
    got = both_passes(wants, 500, {w.endpoint_id: 1000 for w in wants})
    assert per_app(wants, got) == {"A": 400, "B": 100}


def test_more_applications_than_rows_each_still_gets_one_first() -> None:
    wants = [W(i, 10, f"app{i % 7}") for i in range(70)]
    first = first_pass(wants, 5)
    assert {w.app for w in first[:7]} == {f"app{i}" for i in range(7)}
    assert all(w.rows == 1 for w in first)


@pytest.mark.parametrize(
    ("wants", "got", "room", "again"),
    [
        # The busy endpoint used its share and wants more; the idle one had little.
        ([W(1, 1000), W(2, 1000)], {1: 250, 2: 3}, 247, [(1, 247)]),
        # Nobody used the whole share: no second pass.
        ([W(1, 1000), W(2, 1000)], {1: 10, 2: 3}, 487, []),
        # A share that was the whole budget wants nothing more.
        ([W(1, 3), W(2, 1000)], {1: 3, 2: 250}, 247, [(2, 247)]),
        # Remaining budget smaller than the room.
        ([W(1, 260), W(2, 1000)], {1: 250, 2: 0}, 250, [(1, 10)]),
        # A full batch: nothing.
        ([W(1, 1000)], {1: 500}, 0, []),
        # Interleaved across applications: B's first endpoint before A's second.
        (
            [W(1, 1000, "A"), W(2, 1000, "A"), W(3, 1000, "B")],
            {1: 125, 2: 125, 3: 250},
            100,
            [(1, 100), (3, 100), (2, 100)],
        ),
    ],
)
def test_second_pass_takes_the_rest_from_those_that_used_their_share(
    wants: list[Want], got: dict[int, int], room: int, again: list[tuple[int, int]]
) -> None:
    first = first_pass(wants, 500)
    more = second_pass(wants, first, got, room)
    assert [(w.endpoint_id, w.rows) for w in more] == again
    assert all(w.lease_s == 31.0 for w in more)


@pytest.mark.parametrize(
    ("total", "n", "parts"),
    [(10, 4, [3, 3, 2, 2]), (500, 1, [500]), (3, 5, [1, 1, 1, 1, 1]), (0, 2, [1, 1])],
)
def test_split(total: int, n: int, parts: list[int]) -> None:
    assert split(total, n) == parts


def test_interleaved_orders_by_offset_within_the_application() -> None:
    a = [W(1, 5, "A"), W(2, 5, "A"), W(3, 5, "A")]
    b = [W(4, 12, "B"), W(5, 1, "B")]
    assert [w.endpoint_id for w in interleaved([a, b])] == [1, 4, 2, 3, 5]


# Budgets of up to 4 applications with up to 4 endpoints each.
APPS = st.lists(st.lists(st.integers(1, 40), min_size=1, max_size=4), min_size=1, max_size=4)


def wants_of(apps: list[list[int]], order: int) -> list[Want]:
    """The endpoints of every application, in one of a few orders (the
    engine rotates the list; applications' endpoints need not be adjacent)."""
    flat = [
        W(10 * a + i, rows, f"app{a}")
        for a, budgets in enumerate(apps)
        for i, rows in enumerate(budgets)
    ]
    return rotated(flat[order % 2 :: 2] + flat[1 - order % 2 :: 2], order)


@settings(max_examples=400, deadline=None)
@given(apps=APPS, limit=st.integers(1, 120), order=st.integers(0, 7), due=st.integers(0, 50))
def test_properties(apps: list[list[int]], limit: int, order: int, due: int) -> None:
    wants = wants_of(apps, order)
    first = first_pass(wants, limit)
    # Every want once, within its budget, with at least one row.
    assert sorted(w.endpoint_id for w in first) == sorted(w.endpoint_id for w in wants)
    budget = {w.endpoint_id: w.rows for w in wants}
    assert all(1 <= f.rows <= budget[f.endpoint_id] for f in first)
    # Never more than the limit; a full batch whenever the rows are there.
    rows = {w.endpoint_id: due for w in wants}
    got = both_passes(wants, limit, rows)
    assert sum(got.values()) == min(limit, sum(min(due, w.rows) for w in wants))
    assert all(got.get(e, 0) <= min(budget[e], due) for e in budget)
    # With rows due everywhere, no application goes without while the
    # limit allows one row each.
    plenty = {w.endpoint_id: 10_000 for w in wants}
    firsts = per_app(wants, claim(first, limit, plenty))
    if limit >= len(apps):
        assert all(n > 0 for n in firsts.values()), firsts


@settings(max_examples=300, deadline=None)
@given(apps=APPS, limit=st.integers(1, 120), order=st.integers(0, 7))
def test_parts_within_one_when_budgets_allow(apps: list[list[int]], limit: int, order: int) -> None:
    # Budgets allow: no endpoint's budget below its share, no application
    # with more endpoints than its part of the limit.
    if any(len(b) > limit // len(apps) for b in apps):
        return
    apps = [[limit] * len(b) for b in apps]
    wants = wants_of(apps, order)
    got = claim(first_pass(wants, limit), limit, {w.endpoint_id: limit for w in wants})
    parts = per_app(wants, got).values()
    assert sum(parts) == limit and max(parts) - min(parts) <= 1


@settings(max_examples=300, deadline=None)
@given(
    budgets=st.lists(st.integers(1, 60), min_size=1, max_size=8),
    limit=st.integers(1, 200),
    due=st.lists(st.integers(0, 60), min_size=8, max_size=8),
)
def test_one_application_claims_what_the_old_planner_did(
    budgets: list[int], limit: int, due: list[int]
) -> None:
    wants = [W(i, b) for i, b in enumerate(budgets)]
    rows = dict(enumerate(due))
    new, old = first_pass(wants, limit), old_first_pass(wants, limit)
    # The same endpoints in the same order, each share the old one or 1 less
    # (parts within 1 of each other instead of all rounded up) ...
    assert [w.endpoint_id for w in new] == [w.endpoint_id for w in old]
    assert all(o.rows - 1 <= n.rows <= o.rows for n, o in zip(new, old, strict=True))
    # ... and the two passes claim as many rows in all.
    got_old = claim(old, limit, rows)
    left = {e: rows[e] - got_old.get(e, 0) for e in rows}
    room = limit - sum(got_old.values())
    again = [
        w._replace(rows=min(w.rows - f.rows, room))
        for w, f in zip(wants, old, strict=True)
        if got_old.get(w.endpoint_id, 0) == f.rows < w.rows
    ]
    total_old = sum(got_old.values()) + sum(claim(again, room, left).values())
    assert sum(both_passes(wants, limit, rows).values()) == total_old


@pytest.mark.parametrize(("n_apps", "limit"), list(itertools.product(range(1, 6), range(1, 30))))
def test_every_application_first_when_there_is_room(n_apps: int, limit: int) -> None:
    wants = [W(10 * a + i, 50, f"app{a}") for i in range(3) for a in range(n_apps)]
    first = first_pass(wants, limit)
    assert {w.app for w in first[:n_apps]} == {f"app{a}" for a in range(n_apps)}


@pytest.mark.parametrize(
    ("ids", "k", "out"),
    [([], 3, []), ([1, 2, 3], 0, [1, 2, 3]), ([1, 2, 3], 1, [2, 3, 1]), ([1, 2, 3], 5, [3, 1, 2])],
)
def test_rotation(ids: list[int], k: int, out: list[int]) -> None:
    assert rotated(ids, k) == out


def test_counts() -> None:
    assert counts([3, 1, 3, 3]) == {3: 3, 1: 1}
