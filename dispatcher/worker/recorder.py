"""The recorder: buffers outcomes and writes them back in batched transactions.

One transaction per flush: every outcome of the batch in one statement (with
its latency samples); then, for endpoints whose stored breaker can change,
the breaker rows locked, the attempt results folded in the order they were
sent (breaker.fold: the one place transitions are computed), the new states
and transitions written and logged, once; 410s disable endpoints and
Retry-After pauses reach every worker. When this worker knows of ops
webhooks, what the flush caused (core.opsevents.of_flush) is queued to them
by one more statement in the same transaction; without any, nothing is.

It decides nothing about gates: it hands the breakers it stored to
`on_written`, and the engine's gates take them from there. Each written
batch also goes to the rewriter (worker/rewriter.py), which keeps it a
while, to write it again on a server that took over without it, and its
dead letters, once written, to worker/notices.py, which says them (a few a
minute).

An outcome is never dropped: a failed write keeps the batch for the next
try. The buffer is bounded by the worker's window (rows in flight), since nothing new
is claimed while the database is unreachable.
"""

from __future__ import annotations

import asyncio
import operator
import time
from collections import Counter
from collections.abc import Callable

import asyncpg

from dispatcher import log
from dispatcher.core import autodisable, opsevents
from dispatcher.core.breaker import Breaker, BreakerState, fold
from dispatcher.core.models import Outcome, Stats, Status
from dispatcher.db import DATABASE_ERRORS, Conn, acquire, store
from dispatcher.metrics import Metrics
from dispatcher.settings import Settings
from dispatcher.worker.connectivity import Connectivity
from dispatcher.worker.notices import DeadLetters
from dispatcher.worker.rewriter import Rewriter

_STATUS = operator.attrgetter("status")
_DISABLE = operator.attrgetter("disable_endpoint")
_PAUSE = operator.attrgetter("pause_s")

# How long a flush failure waits before trying again; outcomes stay buffered.
FLUSH_RETRY_S = 1.0
# Successes alone skip the breaker write for an endpoint whose stored
# breaker this recorder wrote clean this recently.
QUIET_S = 1.0


def on_auto_disabled(disabled: list[tuple[int, str]]) -> None:
    """Endpoints (id, application) just disabled by disable_after in this
    flush: said once here, whichever worker decided it. (Their
    `endpoint.disabled` operational webhook, reason "auto", is queued with
    the flush's other events, in its transaction.)"""
    for endpoint_id, app in disabled:
        log.event("endpoint_auto_disabled", endpoint_id=endpoint_id, app=app)


class Recorder:
    def __init__(
        self,
        pool: asyncpg.Pool,
        *,
        worker: str,
        settings: Settings,
        metrics: Metrics | None,
        connectivity: Connectivity,
        on_written: Callable[[dict[int, int], dict[int, Breaker]], None],
        ops_webhooks: Callable[[], frozenset[int]] = frozenset,
        rewriter: Rewriter | None = None,
    ) -> None:
        self._pool = pool
        self.worker = worker
        self.stats = Stats()  # what this recorder wrote
        self.metrics = metrics
        self._db = connectivity
        self._on_written = on_written
        # The ops webhooks' ids as the last refresh saw them (none: no
        # emission at all, so the hot path pays nothing without them).
        self._ops_webhooks = ops_webhooks
        # Keeps what was written, to write it again after a failover.
        self._rewriter = rewriter
        self._dead_letters = DeadLetters(time.monotonic)
        self._flush_size = settings.flush_size
        self._flush_interval_s = settings.flush_interval_s
        self._buffer: list[Outcome] = []
        self._results: dict[int, list[bool]] = {}  # attempt results in send order
        self._clean_at: dict[int, float] = {}  # when a clean closed breaker was stored
        self._flush_wanted = asyncio.Event()
        self._flush_lock = asyncio.Lock()
        # A flush failed and its outcomes wait: write them before claiming
        # more, or rows whose lease ran out meanwhile would be sent again.
        self.behind = False

    @property
    def waiting(self) -> int:
        """Outcomes not yet written (for health and metrics)."""
        return len(self._buffer)

    def add(self, outcome: Outcome) -> None:
        self._buffer.append(outcome)
        if len(self._buffer) >= self._flush_size or len(self._buffer) == 1:
            self._flush_wanted.set()

    def add_results(self, endpoint_id: int, results: list[bool]) -> None:
        self._results.setdefault(endpoint_id, []).extend(results)

    async def run(self) -> None:
        while True:
            await self._flush_wanted.wait()
            if len(self._buffer) < self._flush_size:
                await asyncio.sleep(self._flush_interval_s)
            self._flush_wanted.clear()
            started = self._db.now()
            try:
                # One batch a round, then the interval again: outcomes that
                # came during a write wait for the next round rather than
                # being written at once, so that a busy worker writes a batch
                # per interval plus write, not per write (a flush a 44 ms
                # write back to back: 3.9 commits per 1,000 deliveries,
                # measured).
                await self._flush(until_empty=False)
            except DATABASE_ERRORS as exc:
                self.behind = True
                self._db.failed("flush", exc, started=started)
                await asyncio.sleep(FLUSH_RETRY_S)
                self._flush_wanted.set()
            else:
                self._db.ok(started=started, wrote=True)

    async def flush_all(self) -> None:
        """Writes everything buffered; raises (keeping it all) if it cannot."""
        await self._flush(until_empty=True)

    async def _flush(self, *, until_empty: bool) -> None:
        """Writes what is buffered in one batch (a failed flush's outcomes,
        kept at the front of the buffer, among them); `until_empty`: and
        what came meanwhile, batch after batch."""
        async with self._flush_lock:
            while self._buffer or self._results:
                batch, self._buffer = self._buffer, []
                results, self._results = self._results, {}
                try:
                    await self._write(batch, results)
                except BaseException:
                    # Keep them for the next try: an outcome is never dropped.
                    self._buffer = batch + self._buffer
                    for eid, later in self._results.items():
                        results.setdefault(eid, []).extend(later)
                    self._results = results
                    raise
                if not until_empty:
                    break
            self.behind = False

    def _count(self, batch: list[Outcome]) -> None:
        """What was recorded (not merely attempted): the figures engine_stopped reports."""
        st = self.stats
        by_status = Counter(map(_STATUS, batch))  # in C: no Python line per row
        delivered, retried = by_status[Status.DELIVERED], by_status[Status.FAILED]
        dead = by_status[Status.DEAD_LETTER]
        st.delivered += delivered
        st.retried += retried
        st.dead += dead
        st.released += len(batch) - delivered - retried - dead
        if dead:
            for o in batch:
                if o.status is Status.DEAD_LETTER:
                    self._dead_letters.dead(o)

    def stopped(self) -> None:
        """The worker stops: dead letters not shown one by one are said now."""
        self._dead_letters.close()

    def _touched(self, results: dict[int, list[bool]], now_mono: float) -> list[int]:
        """Endpoints whose stored breaker these results may change."""
        return sorted(
            eid
            for eid, oks in results.items()
            if not (all(oks) and now_mono - self._clean_at.get(eid, float("-inf")) < QUIET_S)
        )

    async def _write(self, batch: list[Outcome], results: dict[int, list[bool]]) -> None:
        now_mono = time.monotonic()
        touched = self._touched(results, now_mono)
        # Rare: looked for in C first (any), row by row only when there are some.
        gone: list[int] = []
        if any(map(_DISABLE, batch)):
            gone = sorted({o.endpoint_id for o in batch if o.disable_endpoint})
        pauses: dict[int, float] = {}
        if any(map(_PAUSE, batch)):
            for o in batch:
                if o.pause_s:
                    pauses[o.endpoint_id] = max(pauses.get(o.endpoint_id, 0.0), o.pause_s)
        t0 = time.perf_counter()
        written: dict[int, Breaker] = {}
        transitions: list[tuple[int, str, str]] = []
        disabled: list[int] = []
        auto: list[int] = []
        ops = self._ops_webhooks()
        async with acquire(self._pool) as conn, conn.transaction():
            lags: list[float] = []
            if batch:
                lags = await store.record_outcomes(conn, batch, self.worker)
                self.stats.statements += 1
            if touched:
                written, transitions, auto = await self._write_breakers(conn, touched, results)
            if gone:
                disabled = await store.disable_gone(conn, gone)
                self.stats.statements += 1
            if pauses:
                await store.pause_endpoints(conn, pauses)
                self.stats.statements += 1
            if ops:
                events = opsevents.of_flush(batch, disabled, transitions, ops)
                events += [opsevents.disabled(e, opsevents.AUTO) for e in auto if e not in ops]
                if events:
                    await store.ops_emit(conn, events)
                    self.stats.statements += 1
        self.stats.flushes += 1
        self._count(batch)
        self._dead_letters.tick()
        if self._rewriter is not None:
            self._rewriter.wrote(batch)
        for eid, b in written.items():
            clean = b.state is BreakerState.CLOSED and b.consecutive_failures == 0
            if clean:
                self._clean_at[eid] = now_mono
            else:
                self._clean_at.pop(eid, None)
        if results:
            self._on_written({eid: len(oks) for eid, oks in results.items()}, written)
        if self.metrics is not None:
            m = self.metrics
            m.flush_seconds.observe(time.perf_counter() - t0)
            m.record_outcomes(batch)
            m.record_lags(lags)

    async def _write_breakers(
        self, conn: Conn, ids: list[int], results: dict[int, list[bool]]
    ) -> tuple[dict[int, Breaker], list[tuple[int, str, str]], list[int]]:
        """The new breakers, the transitions (endpoint, from, to) stored, and
        the endpoints disable_after disabled."""
        db_now, locked = await store.lock_breakers(conn, ids)
        new: dict[int, tuple[Breaker, int]] = {}
        runs: dict[int, tuple[float, ...]] = {}
        off: list[int] = []
        transitions: list[tuple[int, str, str, float]] = []
        for eid, stored in locked.items():
            runs[eid], disable = autodisable.fold(
                stored.failure_times,
                results[eid],
                db_now,
                after=stored.disable_after,
                within_s=stored.disable_within_s,
            )
            if disable:
                off.append(eid)
            b, changes = fold(
                stored.breaker,
                results[eid],
                db_now,
                threshold=stored.threshold,
                base_cooldown_s=stored.base_cooldown_s,
            )
            for t in changes:
                transitions.append((eid, t.from_state.value, t.to_state.value, t.cooldown_s))
                log.event(
                    "breaker_transition",
                    endpoint_id=eid,
                    from_state=t.from_state.value,
                    to_state=t.to_state.value,
                    cooldown_s=t.cooldown_s,
                )
                self.stats.breaker_transitions.append((eid, t.from_state.value, t.to_state.value))
            new[eid] = (b, stored.threshold)
        await store.store_breakers(conn, new, runs)
        await store.record_transitions(conn, transitions)
        self.stats.statements += 3
        auto: list[int] = []
        if off:
            done = await store.disable_auto(conn, off)
            on_auto_disabled(done)
            auto = [eid for eid, _ in done]
            self.stats.statements += 1
        return {eid: b for eid, (b, _) in new.items()}, [t[:3] for t in transitions], auto
