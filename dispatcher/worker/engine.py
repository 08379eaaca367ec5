"""The engine: owns the event loop's flow for one worker process.

wait (probe or NOTIFY, as the database's switch says | poll | freed slots |
stop) → claim a batch sized to what each endpoint can start → slots run the
rows (gate → sign → POST) → outcomes to the recorder, which writes them in
batches. No transaction is open while a request is in flight; claims
continue while earlier rows are still being sent.

It decides no policy itself: retry timing comes from retry.py (through
attempt.py, one row's attempt), claim budgets from planner.py (through
claimer.py, which sizes and runs each claim), breaker transitions from
breaker.py (through the gates and the recorder). What it keeps is the
flow: when to claim, where each row's outcome goes, when to stop. Its
helpers run as supervised background tasks: the refresher (endpoints,
shares, probes), the recorder (outcomes) and maintenance. A helper that
ends for any reason but shutdown stops the worker loudly: it never runs on
half alive.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import time
import uuid
from collections.abc import Callable, Coroutine
from typing import Any

import asyncpg

from dispatcher import log
from dispatcher.core import failover, window
from dispatcher.core.errors import OperationalError
from dispatcher.core.models import AttemptResult, Delivery, Outcome, Stats, Status
from dispatcher.db import CONNECT_TIMEOUT_S, acquire, create_pool, require_schema, store, where
from dispatcher.metrics import Metrics
from dispatcher.settings import Settings
from dispatcher.worker import attempt
from dispatcher.worker.claimer import Claimer
from dispatcher.worker.connectivity import Connectivity
from dispatcher.worker.endpointgate import Gate
from dispatcher.worker.gate import Gates
from dispatcher.worker.listener import Listener
from dispatcher.worker.maintenance import Maintenance
from dispatcher.worker.prober import TICK_S, Prober
from dispatcher.worker.recorder import Recorder
from dispatcher.worker.refresher import Refresher
from dispatcher.worker.rewriter import Rewriter
from dispatcher.worker.sender import Sender
from dispatcher.worker.slots import Slots
from dispatcher.worker.tracing import Tracing

# The worker's pooled statements (claims, outcome writes, the heartbeat, the
# endpoints' refresh) take milliseconds; one that takes this long is on a
# connection whose network died silently: the connection is dropped and the
# work retried on a new one, so the worker delivers again within seconds of
# the network's return (SPEC: 10 s). Maintenance's long statements run on a
# connection of their own.
STATEMENT_TIMEOUT_S = 5.0
# A timer for a retry that comes due fires this long after the due time.
RETRY_WAKE_SLACK_S = 0.03
# The stored percentiles' last refresh as the worker stops waits this long.
STOP_REFRESH_S = 5.0

Job = tuple[Delivery, Gate]


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
            proxy=settings.http_proxy,
            ca_file=settings.ca_file,
            tracing=Tracing.from_env(),
            brokers_allowed=settings.brokers_allowed,
        )
        self._draw = random_draw
        self.metrics = metrics
        self._stats = Stats()  # this engine's own claims
        self.connectivity = Connectivity()
        self._gates = Gates(self.sender.wire, settings.target_policy())
        self._wake = asyncio.Event()
        self._stopping = False
        self._cut = asyncio.Event()  # stop(now=True): the grace period is over
        self._drain = False
        self._fatal: BaseException | None = None
        self._inflight = 0  # rows claimed and not yet resolved to an outcome
        # How many rows may be in flight: sized from the loop's headroom
        # unless --max-in-flight fixed it (window.py).
        self._window = window.initial(settings.max_in_flight, now=time.monotonic())
        self._window_max = self._window.limit
        self._claimer = Claimer(settings=settings, worker=self.worker, gates=self._gates,
                                connectivity=self.connectivity, stats=self._stats,
                                metrics=metrics, draw=random_draw,
                                window=lambda: self._window.limit,
                                in_flight=lambda: self._inflight, start=self._start,
                                caught_up=self._caught_up)  # fmt: skip
        self._slots: Slots[Job] = Slots(self._run_row, lambda: self._window.limit)
        self._background: list[asyncio.Task[None]] = []
        self._retry_timer: asyncio.TimerHandle | None = None
        self._retry_due = 0.0  # loop time the timer fires at
        self._pool: asyncpg.Pool | None = None
        self._listener: Listener | None = None
        self._recorder: Recorder | None = None
        self._maintenance: Maintenance | None = None
        self._refresher: Refresher | None = None
        self._prober: Prober | None = None

    # ------------------------------------------------------------ lifecycle

    def stop(self, *, now: bool = False) -> None:
        """Stop claiming; run() then winds down within the grace period.
        `now`: no grace: requests on the wire are cancelled and their rows
        released (or, with the database gone, back when their lease ends)."""
        self._stopping = True
        self._wake.set()
        if now:
            self._cut.set()

    @property
    def in_flight(self) -> int:
        """Rows claimed and not yet resolved: what a stop waits for."""
        return self._inflight

    @property
    def stats(self) -> Stats:
        """What this worker has done: the sum of what each component counted."""
        parts = [self._stats]
        parts += [c.stats for c in (self._recorder, self._refresher) if c is not None]
        return Stats.total(parts)

    @property
    def gates(self) -> Gates:
        return self._gates

    @property
    def waiting_outcomes(self) -> int:
        return 0 if self._recorder is None else self._recorder.waiting

    @property
    def window(self) -> int:
        """Rows this process may have in flight now."""
        return self._window.limit

    def _ops_webhooks(self) -> frozenset[int]:
        return frozenset() if self._refresher is None else self._refresher.ops_webhooks

    def _settling(self) -> bool:
        return self._refresher is not None and self._refresher.settling

    def _holding(self) -> tuple[int, int]:
        """What the heartbeat reports: rows in flight, outcomes not yet written."""
        return self._inflight, self.waiting_outcomes

    async def run(self, *, drain: bool = False) -> None:
        self._drain = drain
        # The descriptor limit as the process runs with it (cmd_run lifts it).
        self._window = window.initial(
            self.settings.max_in_flight,
            now=time.monotonic(),
            ceiling=window.ceiling_for(_fd_limit()),
        )
        self._window_max = self._window.limit
        # Claims and outcomes commit asynchronously unless told otherwise: a
        # write lost to a database crash means a re-delivery (the row's lease
        # runs out), never a lost event, and the WAL flush per statement
        # would otherwise sit on the hot path.
        # Every new connection is checked for a server that lacks the
        # outcomes written lately (a failover): they are written again first.
        keep_s = failover.keep_s(self.settings.lease_margin_s)
        rewriter = Rewriter(worker=self.worker, keep_s=keep_s, ops_webhooks=self._ops_webhooks)
        pool = self._pool = await create_pool(
            self.url,
            size=4,
            synchronous_commit=self.settings.synchronous_commit,
            command_timeout=STATEMENT_TIMEOUT_S,
            connect_timeout=CONNECT_TIMEOUT_S,
            on_connect=rewriter.connected,
        )
        try:
            async with pool.acquire() as conn:
                await require_schema(conn)
            s, db = self.settings, self.connectivity
            self._recorder = Recorder(pool, worker=self.worker, settings=s,
                                      metrics=self.metrics, connectivity=db,
                                      on_written=self._gates.results_written,
                                      ops_webhooks=self._ops_webhooks,
                                      rewriter=rewriter)  # fmt: skip
            # Producers NOTIFY or not by the database's switch (schema 016):
            # the prober finds new rows in probe mode and parks in notify mode.
            prober = self._prober = Prober(self.url, self._wake, db,
                                           busy=lambda: self._claimer.last_got > 0)  # fmt: skip
            self._refresher = Refresher(pool, self._gates, worker=self.worker, settings=s,
                                        box=s.secret_box(), connectivity=db,
                                        wake=self._wake, holding=self._holding,
                                        wake_mode=prober.set_mode)  # fmt: skip
            maintenance = self._maintenance = Maintenance(
                pool, settings=s, connectivity=db, url=self.url
            )
            await self.sender.start()
            self._listener = Listener(self.url, self._wake, db, self._refresher.changed)
            await self._listener.connect()
            # Registers; the membership it finds is applied by the next
            # refresh, which the supervised loop runs at once (`changed`).
            await self._refresher.once()
            if self.metrics is not None:
                self.metrics.watch_worker(lambda: db.connected, lambda: self.waiting_outcomes)
            self._supervise("listener", self._listener.run())
            assert self.sender.sweeper is not None  # started with the sender
            self._supervise("deadlines", self.sender.sweeper)
            self._supervise("prober", prober.run())
            self._supervise("flusher", self._recorder.run())
            self._supervise("refresher", self._refresher.run())
            self._supervise("shares", self._refresher.settle())
            self._supervise("maintenance", maintenance.run())
            self._supervise("window", self._pace())
            # Read as the worker's start line at a terminal (log.py): where
            # it works, on what, and how it stops.
            log.event("engine_started", worker=self.worker, drain=drain, wake=prober.mode.value,
                      database=where(self.url), endpoints=len(self._gates),
                      enabled=sum(1 for g in self._gates if g.endpoint.enabled))  # fmt: skip
            await self._loop()
        finally:
            await self._wind_down()
            st = self.stats
            log.event("engine_stopped", worker=self.worker, delivered=st.delivered,
                      retried=st.retried, dead=st.dead, released=st.released,
                      window=self._window.limit, window_max=self._window_max,
                      claims=st.claims, flushes=st.flushes,
                      statements=st.statements)  # fmt: skip
        if self._fatal is not None:
            raise OperationalError(f"worker stopped: {self._fatal}")

    def _supervise(self, name: str, job: Coroutine[Any, Any, None] | asyncio.Task[None]) -> None:
        """A background job whose end stops the worker. A task owned by
        someone else (the sender's sweeper) is watched, not kept: its owner
        ends it."""
        if isinstance(job, asyncio.Task):
            task = job
        else:
            task = asyncio.create_task(job, name=f"dispatcher-{name}")
            self._background.append(task)

        def ended(t: asyncio.Task[None]) -> None:
            if self._stopping and t.cancelled():
                return
            exc = None if t.cancelled() else t.exception()
            reason = f"{name} ended: {type(exc).__name__}: {exc}" if exc else f"{name} ended"
            log.event("background_task_failed", logging.ERROR, task=name, error=reason[:300])
            self._fatal = self._fatal or RuntimeError(reason[:300])
            self.stop()

        task.add_done_callback(ended)

    async def _loop(self) -> None:
        poll = self.settings.poll_interval_s
        while not self._stopping:
            self._wake.clear()
            got, budget_left = await self._claim()
            if self._stopping:
                break
            if (
                self._drain
                and got == 0
                and self._inflight == 0
                and not self._claimer.failed
                and not self._settling()
            ):
                # Outcomes just written may have made rows due (a retry with
                # no delay); only an empty claim after the flush ends a drain.
                # (A worker that joined others claims nothing until they
                # have made room for it: that is not the end of a drain.)
                await self._flush_all()
                got, _ = await self._claim()
                if got == 0 and self._inflight == 0 and not self._claimer.failed:
                    return
                continue
            if got and budget_left:
                continue  # more may be due and there is room: claim again now
            if self.metrics is not None:
                self.metrics.in_flight.set(self._inflight)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), self._wait_s(poll))

    def _wait_s(self, poll: float) -> float:
        """The poll; while busy with the prober parked (notify mode), its
        tick: the claim is the probe, as the prober's busy tick makes it; a
        claim held back for room sooner."""
        parked = self._prober is not None and self._prober.parked
        return self._claimer.hold_left(TICK_S if parked and self._claimer.last_got > 0 else poll)

    async def _pace(self) -> None:
        """Samples the loop's lag and resizes the window (window.py); room
        that opens up is claimed at once."""
        loop = asyncio.get_running_loop()
        while True:
            t0 = loop.time()
            await asyncio.sleep(window.SAMPLE_S)
            now = loop.time()
            before = self._window.limit
            self._window = window.sampled(
                self._window, now - t0 - window.SAMPLE_S, self._inflight, time.monotonic()
            )
            if self._window.limit > before:
                self._window_max = max(self._window_max, self._window.limit)
                self._wake.set()

    async def _flush_all(self) -> None:
        if self._recorder is not None:
            await self._recorder.flush_all()

    async def _wind_down(self) -> None:
        self._stopping = True
        if self._retry_timer is not None:
            self._retry_timer.cancel()
        # Rows not yet on the wire go back at once; those mid-request get the
        # grace period to finish.
        for d, gate in self._slots.take_ready():
            self._resolve(d, gate, Outcome.handed_back(d), None)
        await self._slots.stop(lambda job: job[0].started, self.settings.grace_s, self._cut)
        # Flush before stopping the flusher: this waits for a write already in
        # progress (never cancelled mid-commit, which could apply it twice).
        with contextlib.suppress(Exception):
            await self._flush_all()
        for helper in self._background:
            helper.cancel()
        for helper in self._background:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await helper
        with contextlib.suppress(Exception):
            await self._flush_all()
        if self._maintenance is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self._maintenance.percentiles(), STOP_REFRESH_S)
        if self._recorder is not None:
            self._recorder.stopped()
        if self._pool is not None:
            with contextlib.suppress(Exception):
                async with acquire(self._pool) as conn:
                    await store.leave(conn, self.worker)
        if self._listener is not None:
            await self._listener.close()
        await self.sender.close()
        if self._pool is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self._pool.close(), 5)

    # ------------------------------------------------------------ claiming

    async def _claim(self) -> tuple[int, bool]:
        """Claims what can be started now (claimer.py). Returns (rows,
        budget left after)."""
        assert self._pool is not None and self._recorder is not None
        return await self._claimer.claim(self._pool, self._recorder, drain=self._drain)

    async def _caught_up(self) -> None:
        if self._refresher is not None:
            await self._refresher.caught_up()

    # ------------------------------------------------------------ delivering

    def _start(self, d: Delivery) -> None:
        gate = self._gates[d.endpoint_id]
        gate.claimed_row()
        self._inflight += 1
        self._stats.claimed += 1
        self._slots.start((d, gate))

    async def _run_row(self, job: Job) -> None:
        """One claimed row on a slot: sent (or not), then resolved."""
        d, gate = job
        try:
            outcome, result = await attempt.deliver(
                gate, d, self.sender, self._is_stopping, self._draw
            )
        except asyncio.CancelledError:
            self._resolve_safely(d, gate, Outcome.handed_back(d), None)  # back unspent
            raise
        except Exception as exc:
            log.event("delivery_task_crashed", logging.ERROR, error=log.crash_site(exc))
            outcome, result = Outcome.handed_back(d), None
        self._resolve_safely(d, gate, outcome, result)

    def _is_stopping(self) -> bool:
        return self._stopping

    def _resolve_safely(
        self, d: Delivery, gate: Gate, outcome: Outcome, result: AttemptResult | None
    ) -> None:
        """_resolve, and a bug in it is logged at once, not when the slot's
        task is collected; the slot goes on with the next row."""
        try:
            self._resolve(d, gate, outcome, result)
        except Exception as exc:
            log.event("delivery_resolve_crashed", logging.ERROR, error=log.crash_site(exc))

    def _resolve(
        self, d: Delivery, gate: Gate, outcome: Outcome, result: AttemptResult | None
    ) -> None:
        """The one place a claimed row is resolved: sent, released or cancelled."""
        gate.released(spent=outcome.spent_attempt)
        self._inflight -= 1
        assert self._recorder is not None and self._refresher is not None
        self._recorder.add(outcome)
        if d.seq >= 0:
            ready = gate.completed(
                d.seq, result, outcome.pause_s, self._refresher.db_now(), self._window.saturated
            )
            if ready:
                self._recorder.add_results(d.endpoint_id, ready)
        if outcome.status is Status.FAILED or outcome.next_attempt_in_s:
            self._wake_for(outcome.next_attempt_in_s)
        if self._claimer.resolved() or self._inflight == 0:
            self._wake.set()

    def _wake_for(self, delay_s: float) -> None:
        """A row comes due again sooner than the next poll: wake then (one
        timer, for the earliest), so short retry delays are kept."""
        # The row's due time is set when its outcome is written, a flush
        # later than now: wake a little after that, not before.
        delay_s += self.settings.flush_interval_s + RETRY_WAKE_SLACK_S
        if delay_s >= self.settings.poll_interval_s:
            return
        loop = asyncio.get_running_loop()
        due = loop.time() + delay_s
        if self._retry_timer is not None:
            if self._retry_due <= due:
                return
            self._retry_timer.cancel()
        self._retry_due = due
        self._retry_timer = loop.call_at(due, self._retry_came_due)

    def _retry_came_due(self) -> None:
        self._retry_timer = None
        self._wake.set()


def _fd_limit() -> int | None:
    """The soft descriptor limit (one socket per request in flight)."""
    try:
        import resource

        soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    except (ImportError, OSError, ValueError):
        return None
    return None if soft == resource.RLIM_INFINITY else int(soft)
