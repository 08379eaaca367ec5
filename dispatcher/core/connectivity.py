"""Whether the worker's database answers and takes writes: the rule for saying
so once per change, whatever number of tasks report.

Every task of a worker reports each round trip: `answered` (it worked) or
`failed`. A failure that is a refusal (disk full, read-only) is an answer:
the database is there, it only will not write. The rules, all from what the
reports carry (when the round trip began, when it ended):

- `database_lost` at the first failure of an outage; further failures say
  nothing.
- `database_back` only when a round trip that *began after the loss*
  answered and no failure followed for SETTLE_S: one task's success on an
  old connection (its query sent before the loss), or one lucky answer
  between failures, is not a return.
- A report about a round trip that began before the last change of state is
  old news and changes nothing (a query stuck in the outage that fails after
  the return does not start a second outage).
- `database_refusing_writes` at the first refusal, and
  `database_accepting_writes` at the first write that worked after it.

No I/O, no clock: the caller passes the times (monotonic seconds).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

# How long the database must answer, without a failure in between, before a
# return is believed.
SETTLE_S = 1.0


@dataclass(frozen=True, slots=True, kw_only=True)
class Link:
    up: bool = True
    changed_at: float = float("-inf")  # when `up` last changed
    lost_at: float = 0.0
    answering_since: float | None = None  # while down: the first fresh answer
    refusing: bool = False
    refusing_since: float = 0.0
    outages: int = 0


@dataclass(frozen=True, slots=True)
class Said:
    """A line to log: the event's name and its fields."""

    event: str
    fields: dict[str, object] = field(default_factory=dict)


def answered(
    link: Link, *, now: float, started: float, wrote: bool, settle_s: float = SETTLE_S
) -> tuple[Link, list[Said]]:
    """A round trip begun at `started` worked (`wrote`: it changed data)."""
    said: list[Said] = []
    if not link.up and started >= link.lost_at:
        since = link.answering_since
        if since is None:
            link = replace(link, answering_since=now)
        elif now - since >= settle_s:
            said.append(Said("database_back", {"down_s": round(since - link.lost_at, 1)}))
            link = replace(link, up=True, changed_at=now, answering_since=None)
    if wrote and link.refusing:
        said.append(
            Said("database_accepting_writes", {"refused_s": round(now - link.refusing_since, 1)})
        )
        link = replace(link, refusing=False)
    return link, said


def failed(
    link: Link, *, now: float, started: float, where: str, error: str, refused: bool
) -> tuple[Link, list[Said]]:
    """A round trip begun at `started` failed; `refused`: the database
    answered that it will not write (it is there)."""
    if refused:
        link, said = answered(link, now=now, started=started, wrote=False)
        if link.refusing:
            return link, said
        refusing = Said("database_refusing_writes", {"where": where, "error": error})
        return replace(link, refusing=True, refusing_since=now), [*said, refusing]
    if started < link.changed_at:
        return link, []
    if not link.up:
        return replace(link, answering_since=None), []
    lost = Said("database_lost", {"where": where, "error": error})
    return replace(
        link,
        up=False,
        changed_at=now,
        lost_at=now,
        answering_since=None,
        outages=link.outages + 1,
    ), [lost]
