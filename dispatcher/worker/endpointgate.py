"""One endpoint's gate: its share, token bucket, adaptive limit, breaker view.

One Gate per endpoint per process (gate.Gates holds them). A gate answers
two questions for the engine: how many rows of this endpoint the next claim
may take (so a claim never holds rows it cannot start soon: its places, and
the few claimed ahead that wait for one, see `ahead`), and whether a
claimed row may be sent now (`admit`: the places and the turn are
admission.py's).

A gate owns its state: other modules tell it what happened (`claimed_row`,
`released`, `completed`, `probe_won`, `sync`, `apply_share`, `reconfigure`,
`results_written`) and ask it questions; none assigns its fields.

A gate also says once, per process, when many of its requests time out
at once (`endpoint_timeouts_at_once`): the first-run sign of a receiver
that cannot take max_in_flight requests at a time (a toy server swamped by
the default 100), which otherwise shows only as the breaker opening.

Limits hold for the endpoint as a whole: with n live workers each gate runs
on what core/shares.py grants it (its share, once the others have shrunk to
theirs), re-balanced as workers come and go; the places it holds count
until they are freed, so that the refresher says it keeps to a share only
when it does.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable
from dataclasses import replace

from dispatcher import log
from dispatcher.core import autodisable, concurrency, shares
from dispatcher.core.breaker import (
    Breaker,
    BreakerState,
    admits,
    effective_threshold,
    fold,
    half_open,
)
from dispatcher.core.models import AttemptResult, Delivery, Endpoint, Verdict
from dispatcher.core.sendorder import SendOrder
from dispatcher.db.store import EndpointState
from dispatcher.worker.admission import Admission, Places
from dispatcher.worker.bucket import Bucket
from dispatcher.worker.wire import EndpointWire

# Rows of a rate-limited endpoint claimed ahead of their tokens: about this
# many seconds of its rate, so claimed rows wait for a token briefly, never
# for a large part of their lease.
RATE_LOOKAHEAD_S = 1.0
# A bucket never holds more tokens than this, whatever a row says the rate is.
MAX_BURST = 1_000_000
# About how long from a place freeing to a claimed row taking it without
# rows claimed ahead: the claim's wake-up, its round trip and the send.
CLAIM_CYCLE_MS = 50.0
# This many timeouts within AT_ONCE_S (at most max_in_flight of them): the
# requests were on the wire together and the receiver answered none in time.
TIMEOUTS_AT_ONCE = 10
AT_ONCE_S = 2.0


class Gate(Places):
    __slots__ = (
        "adaptive",
        "breaker",
        "broken",
        "claimed",
        "endpoint",
        "gone_at",
        "hinted",
        "limiter",
        "max_share",
        "order",
        "p95_ms",
        "paused_until",
        "probe_sent",
        "probing",
        "rate_share",
        "run",
        "timeouts",
        "unwritten",
        "view",
        "wire",
    )

    def __init__(
        self,
        endpoint: Endpoint,
        wire: EndpointWire | None,
        breaker: Breaker,
        broken: str | None = None,
    ) -> None:
        self.endpoint = endpoint
        self.wire = wire
        # Why this endpoint cannot be sent to (a row that no longer decodes,
        # a wire that cannot be built; then wire is None): its deliveries
        # are dead-lettered, the rest flow on.
        self.broken = broken
        self.breaker = breaker  # this process's view; the database's is the truth
        # Results folded into self.breaker that the recorder has not stored
        # yet: until it has, a stored breaker read from the database is
        # older than this view (a refresh must not reopen what just tripped).
        self.unwritten = 0
        # When its own results (a 410, disable_after) disabled it here, before
        # the recorder has written that.
        self.gone_at: float | None = None
        super().__init__()  # no place held, none waited for
        self.adaptive = concurrency.initial(endpoint.max_in_flight)
        # What this process may hold of max_in_flight, and its bucket (rate
        # and burst in proportion): granted by apply_share from the
        # membership seen at the last refresh (None: alone, the whole).
        self.view: shares.View | None = None
        self.max_share = 0
        self.rate_share: float | None = None
        self.limiter: Bucket | None = None
        self.apply_share(None)
        self.order = SendOrder(_horizon(endpoint))
        self.claimed = 0  # claimed by this process, outcome not yet buffered
        self.probing = False  # this process won the half-open probe
        self.probe_sent = False
        self.p95_ms: float | None = None
        self.paused_until = 0.0  # monotonic; Retry-After pauses the endpoint
        self.run: autodisable.Run = ()  # this process's view of disable_after's run
        self.timeouts = (0.0, 0)  # (since, count): timeouts close together
        self.hinted = False  # endpoint_timeouts_at_once said (once per process)

    # ------------------------------------------------------------ configuration

    def reconfigure(
        self, endpoint: Endpoint, wire: EndpointWire | None, broken: str | None = None
    ) -> None:
        old = self.endpoint
        self.endpoint = endpoint
        self.wire = wire
        self.broken = broken
        self.order.horizon_s = _horizon(endpoint)
        if old.max_in_flight != endpoint.max_in_flight:
            # Rows already in flight finish; places() applies to the next.
            self.adaptive = concurrency.resize(self.adaptive, endpoint.max_in_flight)
        self.apply_share(self.view)

    def apply_share(self, view: shares.View | None) -> None:
        """Takes what `view` grants (None: the whole). Shrinking applies at
        once, to rows waiting for a token too; the bucket keeps the tokens it
        has (never more than its new capacity) and starts empty, so neither a
        new process nor a resize sends a burst it was not given."""
        self.view = view
        ep = self.endpoint
        total = ep.max_in_flight
        grant = total if view is None else view.grant(total, ep.id)
        self.max_share = grant
        if ep.rate_per_s is None:
            self.limiter, self.rate_share = None, None
        elif (shaped := shares.bucket(grant, total, ep.rate_per_s, self._burst())) is not None:
            # With nothing granted the bucket stays as it was: sendable()
            # turns away the rows that get a token meanwhile.
            capacity, self.rate_share = shaped
            if self.limiter is None:
                self.limiter = Bucket(capacity, self.rate_share)
            else:
                self.limiter.resize(capacity, self.rate_share)
        if self.adaptive.max_limit != max(grant, 1):
            self.adaptive = concurrency.resize(self.adaptive, max(grant, 1))
        self.place_freed()

    def held(self) -> int:
        """In-flight places this process holds of the endpoint's
        max_in_flight: rows on the wire or waiting for a token. (Rows
        claimed ahead hold none: they take a place only within places().)"""
        return self.sending

    def sync(self, state: EndpointState, worker: str, now_mono: float) -> None:
        """What the database says now: the stored breaker (the truth, other
        workers' outcomes included), who holds the probe, p95, a pause."""
        self.p95_ms = state.p95_ms
        self.paused_until = max(self.paused_until, now_mono + state.paused_for_s)
        if self.unwritten == 0:
            self.breaker = state.breaker
            self.run = state.failure_times
        self.probing = state.breaker.state is BreakerState.HALF_OPEN and state.probe_owner == worker
        if not self.probing:
            self.probe_sent = False

    def _burst(self) -> int:
        """The endpoint's whole burst (workers share it in proportion)."""
        ep = self.endpoint
        assert ep.rate_per_s is not None
        return min(ep.burst or max(1, math.ceil(min(ep.rate_per_s, MAX_BURST))), MAX_BURST)

    def admit(self, d: Delivery, stopping: Callable[[], bool]) -> Admission:
        return Admission(self, d, stopping)

    # ------------------------------------------------------------ questions

    def paused_for(self, now: float | None = None) -> float:
        return max(0.0, self.paused_until - (time.monotonic() if now is None else now))

    def may_probe(self) -> bool:
        return not self.probing and self.max_share > 0 and self.endpoint.enabled

    def sendable(self) -> bool:
        """Ordinary traffic may flow, or this process holds the probe."""
        if not self.endpoint.enabled or self.max_share <= 0:
            return False
        if admits(self.breaker):
            return True
        return self.breaker.state is BreakerState.HALF_OPEN and self.probing

    def budget(self, now: float) -> int:
        """Rows the next claim may take for this endpoint."""
        if not self.endpoint.enabled or self.max_share <= 0 or self.paused_until > now:
            return 0
        if self.wire is not None and self.wire.polled:
            return 0  # its consumer reads its rows (ops.polling)
        if not admits(self.breaker):
            if self.breaker.state is BreakerState.HALF_OPEN and self.probing:
                return 0 if (self.probe_sent or self.claimed) else 1
            return 0
        places = self.places()
        n = places + self.ahead(places) - self.claimed
        if self.limiter is not None and self.rate_share is not None:
            # The tokens there now, plus what refills within the lookahead:
            # no claimed row waits for a token much longer than a second,
            # so none outlives its lease however slow the rate.
            ahead = self.limiter.tokens() + math.floor(
                min(self.rate_share * RATE_LOOKAHEAD_S, MAX_BURST)
            )
            n = min(n, ahead - self.claimed)
        return max(n, 0)

    def places(self) -> int:
        """Requests this process may have on the wire to the endpoint now:
        its share of max_in_flight, within the adaptive limit."""
        return min(self.max_share, self.adaptive.current)

    def ahead(self, places: int) -> int:
        """Rows claimed beyond `places`, waiting in the process for a place.

        Without them a place freed by an answer stays empty until the next
        claim has run (the wake-up, the claim's round trip, the send): by
        Little's law that empty time is rate lost, a tenth of it against a
        200 ms receiver. With them the next row is sent the moment a place
        frees. As many as the endpoint completes in about one claim cycle
        (its healthy latency learned by the adaptive limit), and none while
        it fails (a hanging endpoint's rows would only wait to go back),
        sends one at a time per key (fifo) or has a rate (its rows are
        already claimed ahead of their tokens, RATE_LOOKAHEAD_S: one wait
        per row, so its lease holds).
        """
        base = self.adaptive.baseline_ms
        if base is None or self.limiter is not None or self.endpoint.ordering != "none":
            return 0
        if not self._clean():
            return 0
        return min(places, math.ceil(places * CLAIM_CYCLE_MS / max(base, CLAIM_CYCLE_MS)))

    def lease_s(self, margin_s: float) -> float:
        # The wait for a token is bounded by RATE_LOOKAHEAD_S via budget().
        return self.endpoint.timeout_ms / 1000 + RATE_LOOKAHEAD_S + margin_s

    # ------------------------------------------------------------ what happened

    def probe_won(self) -> None:
        self.breaker = half_open(self.breaker)
        self.probing = True
        self.probe_sent = False

    def claimed_row(self) -> None:
        self.claimed += 1
        if self.probing:
            self.probe_sent = True

    def released(self, *, spent: bool) -> None:
        """A claimed row's outcome was handed to the recorder."""
        self.claimed -= 1
        if not spent and self.probing:
            self.probe_sent = False  # the probe went back unsent: it may be claimed again

    def completed(
        self,
        seq: int,
        result: AttemptResult | None,
        pause_s: float | None,
        db_now: float,
        saturated: bool = False,
    ) -> list[bool]:
        """An attempt sent as `seq` ended (None: it never counted). Updates
        this process's view (so it stops sending at once) and returns the
        results now in send order, for the stored breaker. `saturated`: this
        process's own loop was lagging, so the latency says little about
        the endpoint."""
        mono = time.monotonic()
        if result is not None:
            if result.verdict is Verdict.SUCCESS:
                self.adaptive = concurrency.on_success(
                    self.adaptive, result.response_ms, mono, saturated=saturated
                )
            elif result.overloaded:
                self.adaptive = concurrency.on_overload(self.adaptive, mono)
            elif result.timed_out:
                self.adaptive = concurrency.on_timeout(self.adaptive, mono)
                if not self.hinted:
                    self._timed_out(mono)
            if result.gone:
                self.endpoint = replace(self.endpoint, enabled=False)
                self.gone_at = mono
        if pause_s:
            self.paused_until = max(self.paused_until, mono + pause_s)
        ok = None if result is None else result.verdict is Verdict.SUCCESS
        ready = self.order.completed(seq, ok, mono)
        self.unwritten += len(ready)  # the caller hands them to the recorder
        if ready and (not all(ready) or not self._clean()):
            self.breaker, _ = fold(
                self.breaker,
                ready,
                db_now,
                threshold=self.threshold(),
                base_cooldown_s=self.endpoint.cooldown_s,
            )
        ep = self.endpoint
        if ready and ep.disable_after is not None:
            # As for a 410: this process stops at once; the recorder's fold
            # of the stored run disables the endpoint for every worker.
            self.run, off = autodisable.fold(
                self.run, ready, db_now, after=ep.disable_after, within_s=ep.disable_within_s
            )
            if off:
                self.endpoint = replace(ep, enabled=False)
                self.gone_at = time.monotonic()
        return ready

    def _timed_out(self, mono: float) -> None:
        since, n = self.timeouts
        if mono - since > AT_ONCE_S:
            since, n = mono, 0
        self.timeouts = (since, n + 1)
        ep = self.endpoint
        if n + 1 < min(TIMEOUTS_AT_ONCE, ep.max_in_flight) or ep.max_in_flight < 2:
            return
        self.hinted = True
        log.event(
            "endpoint_timeouts_at_once",
            logging.WARNING,
            endpoint_id=ep.id,
            timeouts=n + 1,
            within_s=AT_ONCE_S,
            max_in_flight=ep.max_in_flight,
            suggested_max_in_flight=max(1, min(10, ep.max_in_flight // 2)),
            timeout_ms=ep.timeout_ms,
        )

    def _clean(self) -> bool:
        b = self.breaker
        return b.state is BreakerState.CLOSED and b.consecutive_failures == 0

    def threshold(self) -> int:
        return effective_threshold(self.endpoint.failure_threshold, self.p95_ms)

    def results_written(self, n: int, b: Breaker | None) -> None:
        """The recorder stored `n` of this gate's results, and `b`, the
        breaker they left (None: they could not change it). It is the truth
        now, unless later results are folded here and not stored yet."""
        self.unwritten = max(0, self.unwritten - n)
        if b is None or self.unwritten:
            return
        self.breaker = b
        if b.state is not BreakerState.HALF_OPEN:
            self.probing = False
            self.probe_sent = False


def _horizon(ep: Endpoint) -> float:
    return ep.timeout_ms / 1000 + 5.0
