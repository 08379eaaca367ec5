"""Claim planning: how many rows of each endpoint one claim may take. Pure.

A claim runs in two passes. First a fair share each, so one claim spreads
over the endpoints instead of filling up with whichever comes first; then,
only if the batch is not full, the rest of the budgets of the endpoints that
used their whole share (one busy endpoint among many idle ones still gets a
full batch). The order of endpoints is rotated per claim so that those early
in the list do not always come first.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import NamedTuple


class Want(NamedTuple):
    """What one endpoint's gate can start now."""

    endpoint_id: int
    rows: int
    lease_s: float


def rotated(ids: Sequence[int], k: int) -> list[int]:
    if not ids:
        return []
    k %= len(ids)
    return [*ids[k:], *ids[:k]]


def first_pass(wants: Sequence[Want], limit: int) -> list[Want]:
    """Each endpoint's fair share of `limit` (rounded up), within its budget."""
    if not wants:
        return []
    fair = max(1, -(-limit // len(wants)))
    return [w._replace(rows=min(w.rows, fair)) for w in wants]


def second_pass(
    wants: Sequence[Want], first: Sequence[Want], got: Mapping[int, int], room: int
) -> list[Want]:
    """The rest of the budgets of the endpoints that got their whole first
    share and wanted more, each capped at the room left in the batch."""
    if room <= 0:
        return []
    return [
        w._replace(rows=min(w.rows - f.rows, room))
        for w, f in zip(wants, first, strict=True)
        if got.get(w.endpoint_id, 0) == f.rows < w.rows
    ]


def counts(endpoint_ids: Sequence[int]) -> dict[int, int]:
    got: dict[int, int] = {}
    for eid in endpoint_ids:
        got[eid] = got.get(eid, 0) + 1
    return got
