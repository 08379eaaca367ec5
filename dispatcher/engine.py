"""The engine: owns the event loop's flow for one worker process.

wait (NOTIFY | poll | freed slots | stop) → claim a batch sized to what each
endpoint can start → one task per row (gate → sign → POST) → outcomes into a
buffer → one batched write per flush. No transaction is open while a request
is in flight; claims continue while earlier rows are still being sent.

It never decides policy itself: retry timing comes from retry.py, breaker
transitions from breaker.py, the adaptive limit from concurrency.py; SQL
stays in store.py, and recorder.py owns the write-back of outcomes.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import random
import socket
import time
import uuid
from collections.abc import Callable
from dataclasses import replace

import asyncpg

from . import concurrency, log, store
from .breaker import Breaker, BreakerState, effective_threshold, on_failure, on_success, probe_due
from .errors import OperationalError
from .gate import Gate
from .listener import Listener
from .metrics import Metrics
from .models import AttemptResult, Delivery, Endpoint, Outcome, Stats, Status, Verdict
from .recorder import Recorder
from .retry import decide
from .sender import Sender
from .settings import Settings

# How long a failed claim waits before the next try.
CLAIM_RETRY_S = 1.0
# `run --drain` gives up when the database stays unreachable this long.
DRAIN_GIVE_UP_S = 30.0


class Engine:
    def __init__(
        self,
        settings: Settings,
        database_url: str,
        *,
        sender: Sender | None = None,
        worker_id: str | None = None,
        random_draw: Callable[[], float] = random.random,
        metrics: Metrics | None = None,
    ) -> None:
        self.settings = settings
        self.url = database_url
        self.worker = worker_id or f"w-{uuid.uuid4().hex[:12]}"
        self.sender = sender or Sender(
            allow_private=settings.allow_private_targets,
            allowed_networks=settings.allowed_networks,
            body_cap=settings.response_body_cap,
        )
        self._box = settings.secret_box()
        self._draw = random_draw
        self.metrics = metrics
        self.stats = Stats()
        self._gates: dict[int, Gate] = {}
        self._order: list[int] = []  # endpoint ids, rotated each claim for fairness
        self._pool: asyncpg.Pool | None = None
        self._listener: Listener | None = None
        self._wake = asyncio.Event()
        self._stopping = False
        self._inflight = 0  # rows claimed and not yet resolved to an outcome
        self._since_claim = 0
        self._tasks: dict[asyncio.Task[None], Delivery] = {}
        self._recorder: Recorder | None = None
        self._db_clock_offset = 0.0  # db_now - time.time(), for breaker decisions
        self._drain = False
        self._claim_failed = False  # an empty claim that was really a failed one
        self._retention_cursor = 0  # where the retention walk of the queue resumes
        self._failing_since = 0.0
        self.workers = 1  # live workers sharing each endpoint's limits
        self._worker_index = 0

    # ------------------------------------------------------------ lifecycle

    def stop(self) -> None:
        """Stop claiming; run() then winds down within the grace period."""
        self._stopping = True
        self._wake.set()

    async def run(self, *, drain: bool = False) -> None:
        self._drain = drain
        # Claims and outcomes commit asynchronously unless told otherwise: a
        # write lost to a database crash means a re-delivery (the row's lease
        # runs out), never a lost event, and the WAL flush per statement
        # would otherwise sit on the hot path.
        self._pool = await store.create_pool(
            self.url, size=4, synchronous_commit=self.settings.synchronous_commit
        )
        background: list[asyncio.Task[None]] = []
        try:
            async with self._pool.acquire() as conn:
                await store.require_schema(conn)
            self._recorder = Recorder(
                self._pool,
                worker=self.worker,
                gates=self._gates,
                stats=self.stats,
                settings=self.settings,
                metrics=self.metrics,
                db_now=self._db_now,
                in_flight=lambda: self._inflight,
            )
            await self.sender.start()
            self._listener = Listener(self.url, self._wake)
            await self._listener.start()
            await self._refresh_endpoints()
            background = [
                asyncio.create_task(self._recorder.run(), name="dispatcher-flusher"),
                asyncio.create_task(self._refresher(), name="dispatcher-refresher"),
                asyncio.create_task(self._maintainer(), name="dispatcher-maintenance"),
            ]
            log.event("engine_started", worker=self.worker, drain=drain)
            await self._loop(drain)
        finally:
            await self._wind_down(background)
            log.event(
                "engine_stopped",
                worker=self.worker,
                delivered=self.stats.delivered,
                retried=self.stats.retried,
                dead=self.stats.dead,
                released=self.stats.released,
            )

    async def _loop(self, drain: bool) -> None:
        poll = self.settings.poll_interval_s
        while not self._stopping:
            self._wake.clear()
            got, budget_left = await self._claim()
            if self._stopping:
                break
            if drain and got == 0 and self._inflight == 0 and not self._claim_failed:
                # Outcomes just written may have made rows due (a retry with
                # no delay); only an empty claim after the flush ends a drain.
                await self._flush_all()
                got, _ = await self._claim()
                if got == 0 and self._inflight == 0 and not self._claim_failed:
                    return
                continue
            if got and budget_left:
                continue  # more may be due and there is room: claim again now
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), poll)

    async def _flush_all(self) -> None:
        if self._recorder is not None:
            await self._recorder.flush_all()

    def _db_now(self) -> float:
        """Epoch seconds on the database's clock, for breaker decisions."""
        return time.time() + self._db_clock_offset

    async def _wind_down(self, background: list[asyncio.Task[None]]) -> None:
        self._stopping = True
        # Rows not yet on the wire go back at once; those mid-request get the
        # grace period to finish.
        for t, d in list(self._tasks.items()):
            if not d.started:
                t.cancel()
        if self._tasks:
            await asyncio.wait(set(self._tasks), timeout=self.settings.grace_s)
        for t in list(self._tasks):
            t.cancel()
        if self._tasks:
            await asyncio.wait(set(self._tasks), timeout=5)
        # Flush before stopping the flusher: this waits for a write already in
        # progress (never cancelled mid-commit, which could apply it twice).
        with contextlib.suppress(Exception):
            await self._flush_all()
        for t in background:
            t.cancel()
        for t in background:
            with contextlib.suppress(asyncio.CancelledError):
                await t
        with contextlib.suppress(Exception):
            await self._flush_all()
        if self._pool is not None:
            with contextlib.suppress(Exception):
                async with self._pool.acquire() as conn:
                    await store.leave(conn, self.worker)
        if self._listener is not None:
            await self._listener.close()
        await self.sender.close()
        if self._pool is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self._pool.close(), 5)

    # ------------------------------------------------------------ endpoints

    async def _refresh_endpoints(self) -> None:
        assert self._pool is not None
        live_s = max(3.0, 3 * self.settings.endpoint_refresh_s)
        async with self._pool.acquire() as conn:
            workers = await store.heartbeat(conn, self.worker, socket.gethostname(), os.getpid(),
                                            live_s)  # fmt: skip
            db_now, rows = await store.engine_endpoints(conn, self._box)
        self.workers = len(workers)
        self._worker_index = workers.index(self.worker)
        self._db_clock_offset = db_now - time.time() if rows else 0.0
        now_mono = time.monotonic()
        seen = set()
        for endpoint, breaker, probe_owner, p95, paused_for in rows:
            seen.add(endpoint.id)
            gate = self._gates.get(endpoint.id)
            if gate is None:
                gate = self._gates[endpoint.id] = Gate(
                    endpoint, self.sender.wire(endpoint), breaker
                )
                self._order.append(endpoint.id)
            elif gate.endpoint != endpoint:
                old = gate.endpoint
                wire = gate.wire
                if (old.url, old.secrets, old.timeout_ms, old.headers) != (
                    endpoint.url,
                    endpoint.secrets,
                    endpoint.timeout_ms,
                    endpoint.headers,
                ):
                    wire = self.sender.wire(endpoint)
                gate.reconfigure(endpoint, wire)
            gate.apply_share(self.workers, self._worker_index)
            gate.p95_ms = p95
            gate.paused_until = max(gate.paused_until, now_mono + paused_for)
            gate.breaker = breaker
            gate.db_clean = (
                breaker.state is BreakerState.CLOSED and breaker.consecutive_failures == 0
            )
            gate.probing = breaker.state is BreakerState.HALF_OPEN and probe_owner == self.worker
            if not gate.probing:
                gate.probe_sent = False
            if probe_due(breaker, db_now) or breaker.state is BreakerState.HALF_OPEN:
                await self._try_probe(gate)
        for gone in set(self._gates) - seen:
            if self._gates[gone].claimed == 0:
                del self._gates[gone]
                self._order.remove(gone)

    async def _try_probe(self, gate: Gate) -> None:
        if gate.probing or gate.max_share <= 0 or not gate.endpoint.enabled:
            return
        assert self._pool is not None
        stale = gate.lease_s(self.settings.lease_margin_s)
        async with self._pool.acquire() as conn:
            won = await store.begin_probe(conn, gate.endpoint.id, self.worker, stale)
        if won:
            gate.breaker = Breaker(
                state=BreakerState.HALF_OPEN,
                consecutive_failures=gate.breaker.consecutive_failures,
                opened_at=gate.breaker.opened_at,
                cooldown_s=gate.breaker.cooldown_s,
            )
            gate.probing = True
            gate.probe_sent = False
            self._record_transition(gate.endpoint.id, "open", "half_open")
            self._wake.set()

    async def _refresher(self) -> None:
        while True:
            await asyncio.sleep(self.settings.endpoint_refresh_s)
            try:
                await self._refresh_endpoints()
            except (OSError, asyncpg.PostgresError, TimeoutError) as exc:
                log.event("refresh_failed", logging.WARNING, error=str(exc)[:200])

    async def _maintainer(self) -> None:
        assert self._pool is not None
        while True:
            await asyncio.sleep(self.settings.percentile_refresh_s)
            try:
                async with self._pool.acquire() as conn:
                    cursor = await store.maintain(
                        conn,
                        self.settings.latency_window_s,
                        self.settings.delivered_retention_s,
                        cursor=self._retention_cursor,
                    )
                if cursor is not None:
                    self._retention_cursor = cursor
            except (OSError, asyncpg.PostgresError, TimeoutError) as exc:
                log.event("maintenance_failed", logging.WARNING, error=str(exc)[:200])

    # ------------------------------------------------------------ claiming

    def _claim_threshold(self) -> int:
        return max(1, min(self.settings.batch_size, self.settings.max_in_flight) // 8)

    async def _claim(self) -> tuple[int, bool]:
        """Claims what can be started now. Returns (rows, budget left after)."""
        free = self.settings.max_in_flight - self._inflight
        if free <= 0 or not self._order:
            return 0, False
        limit = min(free, self.settings.batch_size)
        # Rotate so that endpoints early in the list do not always fill the
        # batch first.
        k = random.randrange(len(self._order))
        order = self._order[k:] + self._order[:k]
        ids: list[int] = []
        budgets: list[int] = []
        leases: list[float] = []
        margin = self.settings.lease_margin_s
        now = time.monotonic()
        wanted: list[int] = []
        for eid in order:
            gate = self._gates[eid]
            n = gate.budget(now)
            if n > 0:
                ids.append(eid)
                wanted.append(n)
                leases.append(gate.lease_s(margin))
        if not ids:
            return 0, False
        # Two passes: first a fair share each, so one claim spreads over the
        # endpoints instead of filling up with whichever comes first; then,
        # only if the batch is not full, the rest of the budgets of the
        # endpoints that used their whole share (one busy endpoint among many
        # idle ones still gets a full batch).
        fair = max(1, -(-limit // len(ids)))
        budgets = [min(n, fair) for n in wanted]
        assert self._pool is not None
        t0 = time.perf_counter()
        try:
            async with self._pool.acquire() as conn:
                rows = await store.claim(
                    conn,
                    endpoint_ids=ids,
                    budgets=budgets,
                    leases_s=leases,
                    limit=limit,
                    worker=self.worker,
                )
                if len(rows) < limit and fair < limit:
                    got: dict[int, int] = {}
                    for d in rows:
                        got[d.endpoint_id] = got.get(d.endpoint_id, 0) + 1
                    again = [
                        (eid, w - b, lease)
                        for eid, b, w, lease in zip(ids, budgets, wanted, leases, strict=True)
                        if got.get(eid, 0) == b < w
                    ]
                    if again:
                        rows += await store.claim(
                            conn,
                            endpoint_ids=[a[0] for a in again],
                            budgets=[min(a[1], limit) for a in again],
                            leases_s=[a[2] for a in again],
                            limit=limit - len(rows),
                            worker=self.worker,
                        )
                        self.stats.statements += 1
        except (OSError, asyncpg.PostgresError, TimeoutError) as exc:
            log.event("claim_failed", logging.WARNING, error=str(exc)[:200])
            self._claim_failed = True
            now = time.monotonic()
            self._failing_since = self._failing_since or now
            if self._drain and now - self._failing_since > DRAIN_GIVE_UP_S:
                # A batch job should fail loudly, not wait forever for a database.
                raise OperationalError(
                    f"database unavailable for {DRAIN_GIVE_UP_S:.0f} s"
                ) from None
            await asyncio.sleep(CLAIM_RETRY_S)
            return 0, False
        self._failing_since = 0.0
        self._claim_failed = False
        self.stats.claims += 1
        self.stats.statements += 1
        if self.metrics is not None:
            self.metrics.claim_seconds.observe(time.perf_counter() - t0)
            self.metrics.in_flight.set(self._inflight + len(rows))
        self._since_claim = 0
        for d in rows:
            self._start(d)
        return len(rows), len(rows) == limit and self._inflight < self.settings.max_in_flight

    def _start(self, d: Delivery) -> None:
        gate = self._gates[d.endpoint_id]
        gate.claimed += 1
        if gate.probing:
            gate.probe_sent = True
        self._inflight += 1
        self.stats.claimed += 1
        task = asyncio.create_task(self._deliver(gate, d))
        self._tasks[task] = d
        task.add_done_callback(self._task_done)

    def _task_done(self, task: asyncio.Task[None]) -> None:
        d = self._tasks.pop(task)
        if not d.done:
            # Cancelled before its first step (its finally never ran): the
            # row still goes back, unspent, exactly once.
            d.done = True
            self._resolve(self._gates[d.endpoint_id], self._release(d))
        if not task.cancelled() and task.exception() is not None:
            log.event("delivery_task_crashed", logging.ERROR, error=repr(task.exception())[:200])

    # ------------------------------------------------------------ delivering

    async def _deliver(self, gate: Gate, d: Delivery) -> None:
        resolved = False
        try:
            async with gate.sem:
                if gate.limiter is not None and gate.sendable():
                    await gate.limiter.acquire()
                if self._stopping or not gate.sendable() or gate.paused_for() > 0:
                    d.done = resolved = True
                    self._resolve(gate, self._release(d, gate.paused_for()))
                    return
                d.started = True
                result = await self.sender.post(gate.wire, d.event_id, d.body)
            outcome = self._decide(gate, d, result)
            d.done = resolved = True
            self._resolve(gate, outcome, result)
        finally:
            if not resolved:
                # Cancelled (shutdown) or crashed: hand the row back unspent.
                d.done = True
                self._resolve(gate, self._release(d))

    def _release(self, d: Delivery, delay_s: float = 0.0) -> Outcome:
        return Outcome(
            delivery_id=d.id,
            endpoint_id=d.endpoint_id,
            status=Status.PENDING,
            next_attempt_in_s=delay_s,
            spent_attempt=False,
        )

    def _decide(self, gate: Gate, d: Delivery, r: AttemptResult) -> Outcome:
        ep = gate.endpoint
        decision = decide(
            verdict=r.verdict,
            attempts_made=d.attempt_count + 1,
            max_attempts=d.max_attempts,
            base_s=ep.retry_base_ms / 1000,
            cap_s=ep.retry_cap_ms / 1000,
            jitter=self._draw(),
            retry_after_s=r.retry_after_s,
        )
        return Outcome(
            delivery_id=d.id,
            endpoint_id=d.endpoint_id,
            status=decision.status,
            next_attempt_in_s=decision.delay_s,
            spent_attempt=True,
            status_code=r.status_code,
            response_ms=r.response_ms,
            error=r.error,
            disable_endpoint=r.gone,
            pause_s=r.retry_after_s if r.overloaded else None,
        )

    def _resolve(self, gate: Gate, outcome: Outcome, result: AttemptResult | None = None) -> None:
        # Bookkeeping first: it cannot fail, so a row is resolved exactly once.
        gate.claimed -= 1
        self._inflight -= 1
        if not outcome.spent_attempt and gate.probing:
            gate.probe_sent = False  # the probe went back unsent: it may be claimed again
        assert self._recorder is not None
        self._recorder.add(outcome)
        st = self.stats
        if outcome.status is Status.DELIVERED:
            st.delivered += 1
        elif outcome.status is Status.FAILED:
            st.retried += 1
        elif outcome.status is Status.DEAD_LETTER:
            st.dead += 1
        else:
            st.released += 1
        self._since_claim += 1
        if self._since_claim >= self._claim_threshold() or self._inflight == 0:
            self._wake.set()
        if result is not None:
            self._observe(gate, outcome, result)

    def _observe(self, gate: Gate, outcome: Outcome, result: AttemptResult) -> None:
        """What this process learns from an attempt, before the flush makes it durable:
        its view of the breaker (so it stops sending at once), the adaptive
        limit, a Retry-After pause, a 410."""
        now = time.time() + self._db_clock_offset
        mono = time.monotonic()
        if result.verdict is Verdict.SUCCESS:
            b = gate.breaker
            if b.consecutive_failures or b.state is not BreakerState.CLOSED:
                gate.breaker = on_success(b, now, base_cooldown_s=gate.endpoint.cooldown_s)
            gate.adaptive = concurrency.on_success(gate.adaptive, result.response_ms, mono)
        else:
            gate.breaker = on_failure(gate.breaker, now, threshold=self._threshold(gate))
            if result.overloaded:
                gate.adaptive = concurrency.on_overload(gate.adaptive, mono)
        if outcome.pause_s:
            gate.paused_until = max(gate.paused_until, mono + outcome.pause_s)
        if outcome.disable_endpoint:
            gate.endpoint = _disabled(gate.endpoint)

    def _threshold(self, gate: Gate) -> int:
        return effective_threshold(gate.endpoint.failure_threshold, gate.p95_ms)

    def _record_transition(self, eid: int, from_state: str, to_state: str) -> None:
        log.event("breaker_transition", endpoint_id=eid, from_state=from_state, to_state=to_state)
        self.stats.breaker_transitions.append((eid, from_state, to_state))


def _disabled(ep: Endpoint) -> Endpoint:
    return replace(ep, enabled=False)
