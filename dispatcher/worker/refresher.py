"""Keeps the engine's gates in step with the database, and takes probes.

Every `endpoint_refresh_s`, and at once when a worker joins, leaves or
applies a new membership (schemas 015, 017): a heartbeat (live workers
share each endpoint's limits), every endpoint with its stored breaker,
probe owner, p95 and pause, applied to the gates, and the wake-up switch
(schema 016), told to its owner; then, for each open breaker whose
cooldown ran out, an attempt at the half-open probe (the store lets
exactly one worker win).

The heartbeat also publishes the membership whose shares this worker keeps
to; the gates take only what core/shares.py grants from what every live
worker published. A membership is published once every gate holds no more
than its share of it, so a worker that joins sends nothing until the
others have shrunk to make room for it.
"""

from __future__ import annotations

import asyncio
import os
import socket
import time
from collections.abc import Callable

import asyncpg

from dispatcher import log
from dispatcher.core import shares
from dispatcher.core.breaker import BreakerState, probe_due
from dispatcher.core.models import Stats, WakeMode
from dispatcher.core.secretbox import SecretBox
from dispatcher.db import acquire, store
from dispatcher.db import wake as wake_switch
from dispatcher.settings import Settings
from dispatcher.worker.connectivity import Connectivity
from dispatcher.worker.endpointgate import Gate
from dispatcher.worker.gate import Gates

# How often a worker that owes the others a smaller share looks whether it
# holds no more than that share yet.
SETTLE_S = 0.02
# The longest a claim waits for a heard endpoint change to be read: a
# refresh takes milliseconds, but seconds on a loaded host (a bound of 1 s
# signed with the secret just rotated out in CI); one that fails releases
# the claims at once (see `once`), so this bounds only a refresh that hangs.
CAUGHT_UP_S = 10.0


class Heard(asyncio.Event):
    """ "An endpoint changed", as the listener sets it, counting how often:
    a read that began after the n-th has read it."""

    def __init__(self) -> None:
        super().__init__()
        self.count = 0

    def set(self) -> None:
        self.count += 1
        super().set()

    def again(self) -> None:
        """A read asked for by the refresher itself (to publish a share it
        may now apply): nothing a claim has to wait for."""
        super().set()


class Refresher:
    def __init__(
        self,
        pool: asyncpg.Pool,
        gates: Gates,
        *,
        worker: str,
        settings: Settings,
        box: SecretBox | None,
        connectivity: Connectivity,
        wake: asyncio.Event,
        holding: Callable[[], tuple[int, int]] = lambda: (0, 0),
        wake_mode: Callable[[WakeMode], None] = lambda _: None,
    ) -> None:
        self._pool = pool
        self._gates = gates
        self._worker = worker
        self._settings = settings
        self._box = box
        self._db = connectivity
        self.stats = Stats()  # the probes this refresher won
        self._wake = wake
        self._holding = holding  # (rows in flight, outcomes not yet written)
        self._wake_mode = wake_mode  # told the switch at each refresh (schema 016)
        self.workers = 1  # live workers sharing each endpoint's limits
        # The membership this worker keeps to (None: none yet, it holds
        # nothing): what the next heartbeat publishes.
        self.applied: shares.Members | None = None
        self._view: shares.View | None = None
        self._short = True  # until the first refresh: see `settling`
        # Set while a membership waits for rows held above its share to
        # drain (settle() then publishes it as soon as they have).
        self._owed = asyncio.Event()
        self.clock_offset = 0.0  # the database's clock minus ours, for breaker decisions
        self.ops_webhooks: frozenset[int] = frozenset()  # their ids, for the recorder
        self.changed = Heard()
        # The count `changed` had when the last read began that ended: every
        # change heard up to it is in the gates, or its read failed (the
        # database away: claims must not wait on the next try).
        self.read_upto = 0

    def db_now(self) -> float:
        """Epoch seconds on the database's clock."""
        return time.time() + self.clock_offset

    async def caught_up(self, bound_s: float = CAUGHT_UP_S) -> None:
        """Returns once every change the listener has heard (Heard.set) is
        read into the gates, so that the claim after `endpoint
        rotate-secret` signs with the new secret rather than racing the
        refresh; or once a read begun after them has failed, or after
        `bound_s`. One comparison when nothing changed."""
        if self.read_upto >= self.changed.count:
            return
        end = time.monotonic() + bound_s
        while self.read_upto < self.changed.count and time.monotonic() < end:
            await asyncio.sleep(0.002)

    async def once(self) -> None:
        heard = self.changed.count
        try:
            await self._read(heard)
        finally:
            self.read_upto = max(self.read_upto, heard)

    async def _read(self, heard: int) -> None:
        live_s = max(3.0, 3 * self._settings.endpoint_refresh_s)
        applied = self.applied
        # One transaction for the three statements: one commit a refresh,
        # not three (the refresh runs every second, busy or not).
        async with acquire(self._pool) as conn, conn.transaction():
            in_flight, waiting = self._holding()
            others = await store.heartbeat(
                conn, self._worker, socket.gethostname(), os.getpid(), live_s,
                in_flight=in_flight, outcomes_waiting=waiting, applied=applied,
            )  # fmt: skip
            db_now, states = await store.engine_endpoints(conn, self._box)
            mode, _ = await wake_switch.read(conn)
        self._wake_mode(mode)
        live = tuple(sorted([*others, self._worker]))
        view = shares.View(me=self._worker, live=live, applied={**others, self._worker: applied})
        self.workers = len(live)
        self.ops_webhooks = frozenset(s.endpoint.id for s in states if s.ops)
        if states:
            self.clock_offset = db_now - time.time()
        due = self._gates.sync(states, self._worker, view)
        self.read_upto = max(self.read_upto, heard)  # the gates have it now
        if applied != live:
            if shares.may_apply(view, self._gates.held()):
                # Within our share of `live` everywhere: say so now, not a
                # refresh later (the others, and we, grow on it).
                self.applied = live
                self.changed.again()
            else:
                self._owed.set()
        for gate in due:
            b = gate.breaker
            if probe_due(b, db_now) or b.state is BreakerState.HALF_OPEN:
                await self._try_probe(gate)
        # After the probes: a drain that sees the shares settled has seen
        # the probes its grants allowed too.
        if view != self._view:
            self._view = view
            self._wake.set()  # a grant may have grown: claim on it
        self._short = self._gates.short(view)

    async def _try_probe(self, gate: Gate) -> None:
        if not gate.may_probe():
            return
        stale = gate.lease_s(self._settings.lease_margin_s)
        async with acquire(self._pool) as conn:
            won = await store.begin_probe(conn, gate.endpoint.id, self._worker, stale)
        if won:
            gate.probe_won()
            # The store recorded the transition with the win; said once, here.
            log.event(
                "breaker_transition",
                endpoint_id=gate.endpoint.id,
                from_state="open",
                to_state="half_open",
            )
            self.stats.breaker_transitions.append((gate.endpoint.id, "open", "half_open"))
            self._wake.set()

    @property
    def settling(self) -> bool:
        """Some gate runs on less than its share of the live membership
        (this worker, or another, has not applied it yet): its grant may
        still grow, so an empty claim is not the end of a drain."""
        return self._short

    async def settle(self) -> None:
        """While a membership is owed, looks every SETTLE_S whether the rows
        held above its share have drained, and then refreshes at once (which
        publishes it): a joining worker waits for the others' rows in
        flight, not for their next refresh."""
        while True:
            await self._owed.wait()
            await asyncio.sleep(SETTLE_S)
            view = self._view
            if view is None or self.applied == view.live:
                self._owed.clear()
            elif shares.may_apply(view, self._gates.held()):
                self._owed.clear()
                self.changed.again()

    async def run(self) -> None:
        """Every `endpoint_refresh_s`, and at once when an endpoint changed
        (`changed`, set by the listener): a rotated secret or a new URL is
        used for the next request, not a refresh later."""
        await self._db.every(
            self._settings.endpoint_refresh_s, "refresh", self.once, early=self.changed
        )
