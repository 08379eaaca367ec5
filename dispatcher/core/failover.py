"""Failover-aware outcomes: which outcomes a worker keeps after writing
them, and which of those it writes again on a server that may lack them.

A standby promoted from asynchronous replication can lack the last writes
the old primary acknowledged: outcomes (delivered, retry scheduled, dead)
whose rows it still holds as claimed or pending, so they would go out
again. The worker keeps what it wrote in the last seconds, tagged with the
server that acknowledged it (a server's identity changes when it is
promoted or restarted), and writes it again, before claiming anything, on
a server with another identity. The store's `rewrite_outcomes` applies an
outcome only to a row that is still not final there and that no one has
attempted since, so writing again is harmless where the write survived.

Pure: no I/O, no clock (the caller passes monotonic times), no asyncio.
"""

from __future__ import annotations

import itertools
import operator
from collections.abc import Iterable, Mapping
from typing import NamedTuple

from dispatcher.core.models import RANGES, Outcome, Status

# At most this many outcomes are kept (about 200 bytes each: 20 MB at
# most); at the fastest measured rate, about 11 s of deliveries, well past
# what an asynchronous standby lags behind.
KEEP_MAX = 100_000


def keep_s(lease_margin_s: float) -> float:
    """How long outcomes are kept: the longest lease an endpoint can have
    (its longest timeout, the 1 s wait for a token, the margin), so that an
    outcome is kept at least as long as its row could have stayed claimed."""
    return RANGES["timeout_ms"][1] / 1000 + 1.0 + lease_margin_s


class Written(NamedTuple):
    """One flush's outcomes worth keeping, as one server acknowledged them."""

    server: str | None  # the identity of the server that acknowledged them
    at: float  # when (monotonic seconds)
    outcomes: tuple[Outcome, ...]


class Rewrite(NamedTuple):
    """One outcome to write again, `ago_s` seconds after it was first written."""

    outcome: Outcome
    ago_s: float


def worth_keeping(o: Outcome) -> bool:
    """An outcome whose loss would send its row again: one that spent an
    attempt, or ended the row. A row handed back unsent is not: lost, it
    comes back after its lease and goes out once. Without the attempt it
    was for, the rewrite could not tell a newer attempt from it."""
    return o.attempt >= 0 and (o.spent_attempt or o.status is not Status.PENDING)


# An outcome's fields up to its record and timings, its last two: kept
# outcomes are built from them, not by _replace, which is a Python loop
# over every field, for each outcome of every flush.
_WITHOUT_RECORD = Outcome._fields.index("detail")
_NO_RECORD = (None, None)
assert Outcome._fields[_WITHOUT_RECORD:] == ("detail", "timing")
_HEAD = operator.itemgetter(slice(0, _WITHOUT_RECORD))
_SPENT = operator.attrgetter("spent_attempt")
_ATTEMPT = operator.attrgetter("attempt")


def kept(outcomes: Iterable[Outcome]) -> tuple[Outcome, ...]:
    """The outcomes worth keeping, without what the rewrite never writes:
    the attempt's record (its headers and the start of its body) and its
    timings. Kept, they made 100,000 outcomes 420 MB of the worker's RSS
    (measured: 494 MB peak on the fast drain against 75 MB without them)."""
    batch = tuple(outcomes)
    if all(map(_SPENT, batch)) and min(map(_ATTEMPT, batch), default=0) >= 0:
        # Every one spent an attempt on a row claimed with its count, so
        # every one is worth keeping: the common flush, stripped by map in
        # C (each outcome's head and two Nones, made an Outcome as _make
        # does), no line of Python per outcome. (Keeping outcomes cost
        # 10,106 instructions a delivery, callgrind, while this was a loop.)
        heads = map(operator.add, map(_HEAD, batch), itertools.repeat(_NO_RECORD))
        return tuple(map(tuple.__new__, itertools.repeat(Outcome), heads))
    return tuple(_stripped(o) for o in batch if worth_keeping(o))


def _stripped(o: Outcome) -> Outcome:
    if o.detail is None and o.timing is None:
        return o
    return Outcome._make(o[:_WITHOUT_RECORD] + _NO_RECORD)


def expired(
    written: Iterable[Written],
    *,
    total: int,
    now: float,
    keep_s: float,
    keep_max: int = KEEP_MAX,
) -> int:
    """How many of the oldest flushes (`written`, oldest first, `total`
    outcomes in all) to forget: those older than `keep_s`, and as many
    more as it takes to hold at most `keep_max` outcomes. It looks at no
    more of them than it forgets, plus one: it runs after every flush."""
    n = 0
    for w in written:
        if now - w.at <= keep_s and total <= keep_max:
            break
        total -= len(w.outcomes)
        n += 1
    return n


def to_rewrite(written: Iterable[Written], *, server: str, now: float) -> list[Rewrite]:
    """The outcomes another server acknowledged than `server`, the one now
    connected, in the order they were written (the store keeps the last of
    each row's, and the earlier ones' latency samples where lost too)."""
    return [
        Rewrite(o, max(0.0, now - w.at)) for w in written if w.server != server for o in w.outcomes
    ]


def applied(rewrites: Iterable[Rewrite], before: Mapping[int, int]) -> list[Outcome]:
    """The last outcome of each row the rewrite changed, given each such
    row's attempt count as the server held it (`before`): what the flushes
    that were lost would have announced (a dead letter, a 410)."""
    last: dict[int, Outcome] = {}
    for r in rewrites:
        o = r.outcome
        if o.delivery_id in before and o.attempt >= before[o.delivery_id]:
            last[o.delivery_id] = o
    return list(last.values())
