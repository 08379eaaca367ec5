"""Dead letters said as they happen, a few at a time.

The recorder hands each dead letter it has written to `DeadLetters.dead`:
the first SHOWN_PER_ENDPOINT per endpoint (and SHOWN_IN_ALL in all) in a
WINDOW_S window are logged one by one (`delivery_dead`: delivery id,
endpoint id, attempts and the stored error class, which by construction
carries no payload, URL or secret); the rest are counted, and said as one
`dead_letters_unshown` line when the window ends (at the next flush after
it, or when the worker stops). A storm of dead letters is therefore a few
lines a minute, and a healthy worker pays nothing: dead letters are rare,
and the recorder already looks at each outcome's status.

The event id is not logged: a producer's event id may be a click or
conversion id (SPEC "Privacy"); the delivery id is what `dlq replay --id`
takes.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from dispatcher import log
from dispatcher.core.models import Outcome

WINDOW_S = 60.0
SHOWN_PER_ENDPOINT = 5
SHOWN_IN_ALL = 20
# Endpoints named in the summary line, the most dead letters first.
NAMED_IN_SUMMARY = 5


class DeadLetters:
    def __init__(self, clock: Callable[[], float]) -> None:
        self._clock = clock
        self._window_end = float("-inf")
        self._shown: dict[int, int] = {}  # per endpoint, in this window
        self._shown_all = 0
        self._unshown: dict[int, int] = {}

    def dead(self, o: Outcome) -> None:
        now = self._clock()
        if now >= self._window_end:
            self._close(now)
        shown = self._shown.get(o.endpoint_id, 0)
        if shown >= SHOWN_PER_ENDPOINT or self._shown_all >= SHOWN_IN_ALL:
            self._unshown[o.endpoint_id] = self._unshown.get(o.endpoint_id, 0) + 1
            return
        self._shown[o.endpoint_id] = shown + 1
        self._shown_all += 1
        log.event(
            "delivery_dead",
            logging.WARNING,
            delivery_id=o.delivery_id,
            endpoint_id=o.endpoint_id,
            attempts=max(0, o.attempt) + (1 if o.spent_attempt else 0),
            status_code=o.status_code,
            error=o.error or "unknown",
        )

    def tick(self) -> None:
        """At each flush: a window that ended says what it did not show."""
        if self._unshown and self._clock() >= self._window_end:
            self._close(self._clock())

    def close(self) -> None:
        """When the worker stops: what was not shown yet, now."""
        self._close(self._clock())

    def _close(self, now: float) -> None:
        if self._unshown:
            ranked = sorted(self._unshown.items(), key=lambda kv: (-kv[1], kv[0]))
            log.event(
                "dead_letters_unshown",
                logging.WARNING,
                count=sum(self._unshown.values()),
                within_s=round(min(WINDOW_S, now - (self._window_end - WINDOW_S)), 1),
                endpoints={str(eid): n for eid, n in ranked[:NAMED_IN_SUMMARY]},
                endpoint_count=len(ranked),
            )
        self._window_end = now + WINDOW_S
        self._shown.clear()
        self._shown_all = 0
        self._unshown = {}
