"""Claim planning: how many rows of each endpoint one claim may take. Pure.

A claim runs in two passes. First a fair share each, on two levels: the
claim's limit is split across the applications that want rows, then each
application's part across its endpoints, so that one application's backlog
over many endpoints cannot crowd out another's fresh events. Then, only if
the batch is not full, the rest of the budgets of the endpoints that used
their whole share (one busy endpoint among many idle ones still gets a full
batch; an application that wanted less than its part leaves it to these).

Each pass is interleaved across applications (every application's first
rows before any application's later ones), so that the claim's LIMIT, which
cuts the list in order, cannot starve one of them. The order of endpoints is
rotated per claim so that those early in the list do not always come first.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import NamedTuple


class Want(NamedTuple):
    """What one endpoint's gate can start now, and its application."""

    endpoint_id: int
    rows: int
    lease_s: float
    app: str = "default"


def rotated(ids: Sequence[int], k: int) -> list[int]:
    if not ids:
        return []
    k %= len(ids)
    return [*ids[k:], *ids[:k]]


def split(total: int, n: int) -> list[int]:
    """`total` in n parts within 1 of each other, the larger ones first; at
    least 1 each (more parts than rows: the claim's LIMIT cuts the list)."""
    base, extra = divmod(total, n)
    return [max(1, base + (i < extra)) for i in range(n)]


def by_app(wants: Sequence[Want]) -> list[list[Want]]:
    """The wants of each application, applications in order of first appearance."""
    apps: dict[str, list[Want]] = {}
    for w in wants:
        apps.setdefault(w.app, []).append(w)
    return list(apps.values())


def interleaved(groups: Sequence[Sequence[Want]]) -> list[Want]:
    """One list, ordered by how far into its application's rows each want
    starts (ties: application order); within an application, its order."""
    placed = []
    for rank, group in enumerate(groups):
        offset = 0
        for w in group:
            placed.append((offset, rank, w))
            offset += w.rows
    placed.sort(key=lambda p: (p[0], p[1]))
    return [w for _, _, w in placed]


def first_pass(wants: Sequence[Want], limit: int) -> list[Want]:
    """Each application's part of `limit`, each of its endpoints' part of
    that, within their budgets; interleaved across applications."""
    if not wants:
        return []
    groups = by_app(wants)
    planned = []
    for group, part in zip(groups, split(limit, len(groups)), strict=True):
        shares = split(part, len(group))
        planned.append(
            [w._replace(rows=min(w.rows, s)) for w, s in zip(group, shares, strict=True)]
        )
    return interleaved(planned)


def second_pass(
    wants: Sequence[Want], first: Sequence[Want], got: Mapping[int, int], room: int
) -> list[Want]:
    """The rest of the budgets of the endpoints that got their whole first
    share and wanted more, each capped at the room left in the batch;
    interleaved across applications."""
    if room <= 0:
        return []
    share = {f.endpoint_id: f.rows for f in first}
    rest = [
        w._replace(rows=min(w.rows - share[w.endpoint_id], room))
        for w in wants
        if got.get(w.endpoint_id, 0) == share[w.endpoint_id] < w.rows
    ]
    return interleaved(by_app(rest))


def counts(endpoint_ids: Sequence[int]) -> dict[int, int]:
    got: dict[int, int] = {}
    for eid in endpoint_ids:
        got[eid] = got.get(eid, 0) + 1
    return got
