"""Claiming for one engine: how many rows a claim takes, and taking them.

A claim is sized to what can start soon: the window's free room, and per
endpoint its gate's budget (its places, the few claimed ahead, the tokens
near at hand), in the rotated order planner.py plans two passes over. Each
pass's rows are on their way (`start`) before the next pass runs. A claim
is skipped while only a handful of rows claimed ahead are wanted (the
threshold), and after a failed one the claimer waits before the next;
under `run --drain` it gives up once the database has been away too long.
When to claim is the engine's (engine.py's loop); the claimer says what
the last claim found (`last_got`, `failed`) and when enough rows have been
resolved since that another is due (`resolved`).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable

import asyncpg

from dispatcher.core import planner
from dispatcher.core.errors import OperationalError
from dispatcher.core.models import Delivery, Stats
from dispatcher.db import DATABASE_ERRORS, Conn, acquire, store
from dispatcher.metrics import Metrics
from dispatcher.settings import Settings
from dispatcher.worker.connectivity import Connectivity
from dispatcher.worker.gate import Gates
from dispatcher.worker.recorder import Recorder

# How long a failed claim waits before the next try.
CLAIM_RETRY_S = 1.0
# A claim the window leaves less than a quarter of itself to fill waits this
# long after the last one, for more room. A busy loop otherwise alternates a
# full claim with one for the few rows answered while it ran (18 / 238 rows
# of a 256 window, half the claims a drain makes, measured); a place kept
# free this long costs a 200 ms receiver nothing measurable.
HOLD_S = 0.02
# `run --drain` gives up when the database stays unreachable this long.
DRAIN_GIVE_UP_S = 30.0


class Claimer:
    def __init__(
        self,
        *,
        settings: Settings,
        worker: str,
        gates: Gates,
        connectivity: Connectivity,
        stats: Stats,
        metrics: Metrics | None,
        draw: Callable[[], float],
        window: Callable[[], int],
        in_flight: Callable[[], int],
        start: Callable[[Delivery], None],
        caught_up: Callable[[], Awaitable[None]],
    ) -> None:
        """`window` and `in_flight`: the engine's room now (rows it may
        have in flight, rows it has); `start`: hands a claimed row on;
        `caught_up`: returns once every endpoint change heard is in the
        gates (refresher.py)."""
        self._settings = settings
        self._worker = worker
        self._gates = gates
        self._connectivity = connectivity
        self._stats = stats  # the engine's own: claims and statements counted there
        self._metrics = metrics
        self._draw = draw
        self._window = window
        self._in_flight = in_flight
        self._start = start
        self._caught_up = caught_up
        self._failing_since = 0.0
        self.failed = False  # an empty claim that was really a failed one
        self.last_got = 0  # rows the last claim that ran got: the prober's busy signal
        self._since = 0  # rows resolved since the last claim that ran
        self._ran_at = float("-inf")  # when the last claim that ran ended
        self._held_until = 0.0  # a claim held back (HOLD_S) is due then

    def threshold(self) -> int:
        return max(1, min(self._settings.batch_size, self._window()) // 8)

    def hold_left(self, wait_s: float) -> float:
        """`wait_s`, or less if a claim held back comes due sooner (nothing
        else may wake the loop for it)."""
        if not self._held_until:
            return wait_s
        return min(wait_s, max(0.0, self._held_until - time.monotonic()))

    def resolved(self) -> bool:
        """One more claimed row was resolved; True when enough have been
        since the last claim that the next is due."""
        self._since += 1
        return self._since >= self.threshold()

    def _wants(self) -> tuple[list[planner.Want], bool]:
        """What each gate can take now, and whether any has a place free
        with no row waiting for it (then a claim is due at once)."""
        now = time.monotonic()
        margin = self._settings.lease_margin_s
        ids = self._gates.ids
        wants = []
        hungry = False
        for eid in planner.rotated(ids, int(self._draw() * len(ids))):
            gate = self._gates[eid]
            n = gate.budget(now)
            if n > 0:
                wants.append(planner.Want(eid, n, gate.lease_s(margin), gate.endpoint.app))
                hungry = hungry or gate.claimed < gate.places()
        return wants, hungry

    async def claim(
        self, pool: asyncpg.Pool, recorder: Recorder, *, drain: bool
    ) -> tuple[int, bool]:
        """Claims what can be started now. Returns (rows, budget left after)."""
        free = self._window() - self._in_flight()
        if free <= 0:
            return 0, False
        started = self._connectivity.now()
        if recorder.behind:
            try:
                await recorder.flush_all()
            except DATABASE_ERRORS as exc:
                await self._failed_with(exc, started, drain)
                return 0, False
        await self._caught_up()
        wants, hungry = self._wants()
        if not wants:
            return 0, False
        if not hungry and sum(w.rows for w in wants) < self.threshold():
            # Only rows claimed ahead are wanted, and every place is busy or
            # has a row waiting for it: top them up in one claim of some
            # size, not a query for a handful on every busy tick (three
            # times the transactions per delivery, measured).
            return 0, False
        limit = min(free, self._settings.batch_size)
        if limit < 2 * self.threshold() and time.monotonic() - self._ran_at < HOLD_S:
            # The window, not the gates, is what is short: a claim now
            # would take the few rows answered while the last one ran.
            self._held_until = self._ran_at + HOLD_S
            return 0, False
        first = planner.first_pass(wants, limit)
        t0 = time.perf_counter()
        rows: list[Delivery] = []
        try:
            async with acquire(pool) as conn:
                rows = await self._claim_pass(conn, first, limit)
                more = planner.second_pass(
                    wants, first, planner.counts([d.endpoint_id for d in rows]), limit - len(rows)
                )
                if more:
                    rows += await self._claim_pass(conn, more, limit - len(rows))
        except DATABASE_ERRORS as exc:
            await self._failed_with(exc, started, drain)
            return len(rows), False
        self._connectivity.ok(started=started, wrote=True)
        self._failing_since = 0.0
        self.failed = False
        self._stats.claims += 1
        if self._metrics is not None:
            self._metrics.claim_seconds.observe(time.perf_counter() - t0)
            self._metrics.in_flight.set(self._in_flight())
        self._since = 0
        self._ran_at = time.monotonic()
        self._held_until = 0.0
        # Only a claim that ran says busy or idle: a full window or no
        # sendable endpoint keeps the last answer (the prober then wakes
        # the loop each tick, which costs no query, rather than probing).
        self.last_got = len(rows)
        return len(rows), len(rows) == limit and self._in_flight() < self._window()

    async def _claim_pass(
        self, conn: Conn, wants: list[planner.Want], limit: int
    ) -> list[Delivery]:
        self._stats.statements += 1
        rows = await store.claim(
            conn,
            endpoint_ids=[w.endpoint_id for w in wants],
            budgets=[w.rows for w in wants],
            leases_s=[w.lease_s for w in wants],
            limit=limit,
            worker=self._worker,
        )
        if rows:
            # A secret rotated while the claim was on its way (after the
            # check above) committed before the rows this claim saw, and
            # its notification is read by now, or within a turn of the loop
            # (another socket): sign with it, not with the gates' last read.
            await asyncio.sleep(0)
            await self._caught_up()
        # On their way at once: a first pass's rows (an application's fresh
        # event among them) do not wait for the second pass, nor for its
        # failure, which would leave them to their lease.
        for d in rows:
            self._start(d)
        return rows

    async def _failed_with(self, exc: BaseException, started: float, drain: bool) -> None:
        self._connectivity.failed("claim", exc, started=started)
        self.failed = True
        now = time.monotonic()
        self._failing_since = self._failing_since or now
        if drain and now - self._failing_since > DRAIN_GIVE_UP_S:
            # A batch job should fail loudly, not wait forever for a database.
            raise OperationalError(f"database unavailable for {DRAIN_GIVE_UP_S:.0f} s") from None
        await asyncio.sleep(CLAIM_RETRY_S)
