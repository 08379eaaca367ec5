"""The recorder: buffers outcomes and writes them back in batched transactions.

One transaction per flush: every outcome of the batch in one statement (with
its latency samples), then, only for endpoints whose stored breaker can
change, the breaker rows locked, the pure transitions applied in order, and
the new states and transitions written; 410s disable endpoints and
Retry-After pauses reach every worker. An outcome is never dropped: a failed
write keeps the batch for the next try.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable

import asyncpg

from . import log, store
from .breaker import Breaker, BreakerState, effective_threshold, on_failure, on_success
from .gate import Gate
from .metrics import Metrics
from .models import Outcome, Stats, Status
from .settings import Settings

# How long a flush failure waits before trying again; outcomes stay buffered.
FLUSH_RETRY_S = 1.0


class Recorder:
    def __init__(
        self,
        pool: asyncpg.Pool,
        *,
        worker: str,
        gates: dict[int, Gate],
        stats: Stats,
        settings: Settings,
        metrics: Metrics | None,
        db_now: Callable[[], float],
        in_flight: Callable[[], int],
    ) -> None:
        self._pool = pool
        self.worker = worker
        self._gates = gates
        self.stats = stats
        self.metrics = metrics
        self._db_now = db_now
        self._in_flight = in_flight
        self._flush_size = settings.flush_size
        self._flush_interval_s = settings.flush_interval_s
        self._buffer: list[Outcome] = []
        self._flush_wanted = asyncio.Event()
        self._flush_lock = asyncio.Lock()

    def add(self, outcome: Outcome) -> None:
        self._buffer.append(outcome)
        if len(self._buffer) >= self._flush_size or len(self._buffer) == 1:
            self._flush_wanted.set()

    async def run(self) -> None:
        while True:
            await self._flush_wanted.wait()
            if len(self._buffer) < self._flush_size:
                await asyncio.sleep(self._flush_interval_s)
            self._flush_wanted.clear()
            try:
                await self.flush_all()
            except (OSError, asyncpg.PostgresError, TimeoutError) as exc:
                log.event("flush_failed", logging.WARNING, error=str(exc)[:200])
                await asyncio.sleep(FLUSH_RETRY_S)
                self._flush_wanted.set()

    async def flush_all(self) -> None:
        async with self._flush_lock:
            while self._buffer:
                batch = self._buffer
                self._buffer = []
                try:
                    await self._write(batch)
                except BaseException:
                    # Keep them for the next try: an outcome is never dropped.
                    self._buffer = batch + self._buffer
                    raise

    async def _write(self, batch: list[Outcome]) -> None:
        spent: dict[int, list[Outcome]] = {}
        for o in batch:
            if o.spent_attempt:
                spent.setdefault(o.endpoint_id, []).append(o)
        now_mono = time.monotonic()
        touched = []
        for eid, outs in spent.items():
            gate = self._gates.get(eid)
            # Skip the health write only when the stored breaker is already
            # closed and clean (the local view runs ahead of the database).
            quiet = (
                gate is not None
                and gate.db_clean
                and all(o.status is Status.DELIVERED for o in outs)
                and now_mono - gate.success_written_at < 1.0
            )
            if not quiet:
                touched.append(eid)
        gone = sorted({o.endpoint_id for o in batch if o.disable_endpoint})
        pauses: dict[int, float] = {}
        for o in batch:
            if o.pause_s:
                pauses[o.endpoint_id] = max(pauses.get(o.endpoint_id, 0.0), o.pause_s)
        t0 = time.perf_counter()
        async with self._pool.acquire() as conn, conn.transaction():
            lags = await store.record_outcomes(conn, batch, self.worker)
            self.stats.statements += 1
            if touched:
                await self._write_breakers(conn, sorted(touched), spent)
            if gone:
                await store.disable_gone(conn, gone)
                self.stats.statements += 1
            if pauses:
                await store.pause_endpoints(conn, pauses)
                self.stats.statements += 1
        self.stats.flushes += 1
        if self.metrics is not None:
            m = self.metrics
            m.flush_seconds.observe(time.perf_counter() - t0)
            m.record_outcomes(
                (o.status.value if o.spent_attempt else "released", o.response_ms) for o in batch
            )
            m.record_lags(lags)
            m.in_flight.set(self._in_flight())
        for eid in touched:
            gate = self._gates.get(eid)
            if gate is not None:
                gate.success_written_at = now_mono

    async def _write_breakers(
        self, conn: store.Conn, ids: list[int], spent: dict[int, list[Outcome]]
    ) -> None:
        locked = await store.lock_breakers(conn, ids)
        now = self._db_now()
        new: dict[int, tuple[Breaker, int]] = {}
        transitions: list[tuple[int, str, str, float]] = []
        for eid, (b, p95) in locked.items():
            gate = self._gates.get(eid)
            ep = gate.endpoint if gate is not None else None
            threshold = effective_threshold(ep.failure_threshold if ep else 10, p95)
            base_cooldown = ep.cooldown_s if ep else b.cooldown_s
            before = b.state
            for o in spent[eid]:
                if o.status is Status.DELIVERED:
                    b = on_success(b, now, base_cooldown_s=base_cooldown)
                else:
                    b = on_failure(b, now, threshold=threshold)
                if b.state is not before:
                    transitions.append((eid, before.value, b.state.value, b.cooldown_s))
                    log.event(
                        "breaker_transition",
                        endpoint_id=eid,
                        from_state=before.value,
                        to_state=b.state.value,
                        cooldown_s=b.cooldown_s,
                    )
                    self.stats.breaker_transitions.append((eid, before.value, b.state.value))
                    before = b.state
            new[eid] = (b, threshold)
            if gate is not None:
                gate.breaker = b
                gate.db_clean = b.state is BreakerState.CLOSED and b.consecutive_failures == 0
                if b.state is not BreakerState.HALF_OPEN:
                    gate.probing = False
                    gate.probe_sent = False
        await store.store_breakers(conn, new)
        await store.record_transitions(conn, transitions)
        self.stats.statements += 3
