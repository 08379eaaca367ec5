"""Disabling an endpoint after N consecutive failed attempts within S
seconds (`disable_after`, `disable_within_s`; Everflow's "10 in 72 h").

Pure, like the breaker: the times of the current run of failures go in with
the attempt results (in send order) and the database clock, the new run and
the verdict come out. The worker's gate folds its own results with it (so
it stops sending at once) and the recorder folds the stored run with the
row locked (so the decision holds across workers).
"""

from __future__ import annotations

from collections.abc import Iterable

Run = tuple[float, ...]  # failure times (epoch s), oldest first, at most `after`


def fold(
    run: Run, results: Iterable[bool], now: float, *, after: int | None, within_s: float | None
) -> tuple[Run, bool]:
    """The run after these results, and whether it disables the endpoint:
    `after` failures in a row, the first no more than `within_s` before the
    last. A success ends the run; a disable starts a new one (an endpoint
    enabled again is judged afresh). Without a setting, nothing is kept."""
    if after is None or within_s is None:
        return (), False
    disable = False
    for ok in results:
        if ok:
            run = ()
            continue
        run = (*run, now)[-after:]
        if len(run) == after and run[-1] - run[0] <= within_s:
            disable, run = True, ()
    return run, disable
