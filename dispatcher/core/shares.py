"""Each worker's share of an endpoint's limits, and when it may use it. Pure.

Every live worker takes a whole share of each endpoint's `max_in_flight`
(`split`; its rate and burst follow in proportion), and the shares of one
membership add up to the limit exactly. Membership changes are the danger:
a worker that counts three live workers and one that still counts two
each take their share of a different split, and together more than the
whole. So each worker publishes the membership it has *applied*: "what I
hold and may start is within my share of these workers". It publishes a
membership only once it is within that share (its claimed rows drained to
it, its bucket resized), and it never holds more than its applied share.

A worker's `grant` is then what the others cannot be holding: the limit
less every other live worker's share of the membership that worker has
applied, capped by its own share of the live membership and of its own
applied one. A newcomer (applied: nothing yet) is counted as holding
nothing, and is granted nothing while an older worker still applies a
membership without it; it grows to its share once every other live worker
has applied one with it. A worker that leaves or whose heartbeat expires
drops out of the sum, so the others grow (after applying the smaller
membership): safe, as a dead worker sends nothing.

Shrinking is safe at once; growing waits for the others. However the
workers' reads and writes interleave, the grants in use add up to at most
the limit (tests/unit/test_shares.py plays random interleavings).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

Members = tuple[str, ...]


def split(total: int, workers: int, index: int, salt: int) -> int:
    """This worker's whole share of `total`; the shares add up to `total`.

    The remainder goes to different workers for different endpoints (salt),
    so many endpoints with a limit of 1 spread over the workers.
    """
    base, extra = divmod(total, workers)
    return base + (1 if (index - salt) % workers < extra else 0)


def share_of(worker: str, members: Sequence[str] | None, total: int, salt: int) -> int:
    """`worker`'s share of `total` when `members` (sorted) are live. None:
    a worker that has applied no membership yet holds nothing. A membership
    without the worker itself is not one it could have applied: counted as
    the whole, so nobody grows on it."""
    if members is None:
        return 0
    if worker not in members:
        return total
    return split(total, len(members), members.index(worker), salt)


@dataclass(frozen=True, slots=True, kw_only=True)
class View:
    """What one worker read in one statement: the live workers (sorted, this
    one among them) and the membership each of them has applied (this one's
    as it just wrote it)."""

    me: str
    live: Members
    applied: Mapping[str, Members | None]

    def grant(self, total: int, salt: int) -> int:
        """What this worker may hold of `total` now (see the module's docstring)."""
        others = sum(
            share_of(w, self.applied.get(w), total, salt) for w in self.live if w != self.me
        )
        cap = min(
            share_of(self.me, self.live, total, salt),
            share_of(self.me, self.applied.get(self.me), total, salt),
        )
        return max(0, min(cap, total - others))

    def target(self, total: int, salt: int) -> int:
        """This worker's share once every live worker has applied `live`."""
        return share_of(self.me, self.live, total, salt)


def may_apply(view: View, held: Sequence[tuple[int, int, int]]) -> bool:
    """Whether this worker may publish `view.live` as applied: for each
    endpoint (total, salt, rows held), what it holds is within its share."""
    return all(n <= view.target(total, salt) for total, salt, n in held)


def bucket(grant: int, total: int, rate: float | None, burst: int) -> tuple[int, float] | None:
    """This worker's token bucket for a grant of `grant` in-flight places out
    of `total`: (capacity, refill per second), both in proportion to the
    grant; None when it has no rate to keep (no limit, or nothing granted).
    Capacities round down, so that they add up to at most the endpoint's
    burst, but never below one token (a bucket of none never sends)."""
    if rate is None or grant <= 0 or total <= 0:
        return None
    return max(1, burst * grant // total), rate * grant / total
