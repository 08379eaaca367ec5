"""Keeps the engine's gates in step with the database, and takes probes.

Every `endpoint_refresh_s`: a heartbeat (live workers share each endpoint's
limits), every endpoint with its stored breaker, probe owner, p95 and pause,
applied to the gates, and the wake-up switch (schema 016), told to its
owner; then, for each open breaker whose cooldown ran out,
an attempt at the half-open probe (the store lets exactly one worker win).
"""

from __future__ import annotations

import asyncio
import os
import socket
import time
from collections.abc import Callable

import asyncpg

from dispatcher import log
from dispatcher.core.breaker import BreakerState, probe_due
from dispatcher.core.models import Stats, WakeMode
from dispatcher.core.secretbox import SecretBox
from dispatcher.db import acquire, store
from dispatcher.db import wake as wake_switch
from dispatcher.settings import Settings
from dispatcher.worker.connectivity import Connectivity
from dispatcher.worker.gate import Gate, Gates


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
        self.clock_offset = 0.0  # the database's clock minus ours, for breaker decisions
        self.ops_webhooks: frozenset[int] = frozenset()  # their ids, for the recorder
        self.changed = asyncio.Event()

    def db_now(self) -> float:
        """Epoch seconds on the database's clock."""
        return time.time() + self.clock_offset

    async def once(self) -> None:
        live_s = max(3.0, 3 * self._settings.endpoint_refresh_s)
        async with acquire(self._pool) as conn:
            in_flight, waiting = self._holding()
            workers = await store.heartbeat(
                conn, self._worker, socket.gethostname(), os.getpid(), live_s,
                in_flight=in_flight, outcomes_waiting=waiting,
            )  # fmt: skip
            db_now, states = await store.engine_endpoints(conn, self._box)
            mode, _ = await wake_switch.read(conn)
        self._wake_mode(mode)
        self.workers = len(workers)
        self.ops_webhooks = frozenset(s.endpoint.id for s in states if s.ops)
        if states:
            self.clock_offset = db_now - time.time()
        index = workers.index(self._worker)
        for gate in self._gates.sync(states, self._worker, self.workers, index):
            b = gate.breaker
            if probe_due(b, db_now) or b.state is BreakerState.HALF_OPEN:
                await self._try_probe(gate)

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

    async def run(self) -> None:
        """Every `endpoint_refresh_s`, and at once when an endpoint changed
        (`changed`, set by the listener): a rotated secret or a new URL is
        used for the next request, not a refresh later."""
        await self._db.every(
            self._settings.endpoint_refresh_s, "refresh", self.once, early=self.changed
        )
