"""Claim planning: a table of budgets in, the rows each pass may claim out."""

from __future__ import annotations

import pytest

from dispatcher.planner import Want, counts, first_pass, rotated, second_pass


def W(eid: int, rows: int) -> Want:
    return Want(eid, rows, 31.0)


@pytest.mark.parametrize(
    ("wants", "limit", "first"),
    [
        ([], 500, []),
        ([W(1, 1000)], 500, [500]),  # one endpoint: the whole batch
        ([W(1, 3)], 500, [3]),  # never more than the gate can start
        ([W(1, 1000), W(2, 1000)], 500, [250, 250]),
        ([W(1, 1000), W(2, 10), W(3, 1000)], 500, [167, 10, 167]),  # fair share rounds up
        ([W(i, 5) for i in range(1000)], 500, [1] * 1000),  # more endpoints than rows: 1 each
    ],
)
def test_first_pass_gives_each_a_fair_share(
    wants: list[Want], limit: int, first: list[int]
) -> None:
    assert [w.rows for w in first_pass(wants, limit)] == first


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
    ("ids", "k", "out"),
    [([], 3, []), ([1, 2, 3], 0, [1, 2, 3]), ([1, 2, 3], 1, [2, 3, 1]), ([1, 2, 3], 5, [3, 1, 2])],
)
def test_rotation(ids: list[int], k: int, out: list[int]) -> None:
    assert rotated(ids, k) == out


def test_counts() -> None:
    assert counts([3, 1, 3, 3]) == {3: 3, 1: 1}
