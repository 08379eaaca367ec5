"""How an idle worker learns that producers committed new rows: a cheap
probe every few milliseconds, instead of a NOTIFY from every producer.

Why not NOTIFY: a transaction that NOTIFYs takes one lock for the whole
server at commit and keeps it through its WAL flush, so producers that
enqueue in their own transactions commit one at a time. Producers now
commit like any INSERT, and each worker asks instead:

- while busy (the last claim that ran found rows), it just wakes the loop
  every tick: the claim is the probe, and it costs no query while the
  window is full or no endpoint can take more;
- while idle, it reads a signature of the live rows above a watermark
  (their count and a hash sum of their ids: one primary-key range scan of
  the last second's rows) and wakes the engine when it changes. Updates
  (claims, retries) do not change it; a row leaving for history does (a
  wake for nothing); a commit of new rows does, whatever order producers
  commit in, because the watermark is the
  newest id seen about a second ago: it covers every transaction that
  commits within a second of its INSERT. A longer one is claimed by the
  engine's poll (poll_interval_s), as retries and expired leases are.

In `notify` mode (the database's wake-up switch, schema 016) producers'
enqueues NOTIFY and the listener wakes the engine: the prober parks, runs
no query and holds no connection until the switch says `probe` again (the
engine then keeps the busy tick itself, as a timeout of its wait).

It never claims or decides anything itself: it only sets the engine's wake
event. It keeps a connection of its own (a pooled one would cost more per
probe in the acquire than in the query) and opens a new one after a
database error, which is reported to the worker's Connectivity.
"""

from __future__ import annotations

import asyncio
import collections
import time
from collections.abc import Callable

import asyncpg

from dispatcher import log
from dispatcher.core.models import WakeMode
from dispatcher.db import DATABASE_ERRORS, open_connection, store
from dispatcher.worker.connectivity import Connectivity

# How often an idle worker looks: half of it is the average added wake latency.
TICK_S = 0.01
# How far behind the newest id the watermark stays: the longest INSERT-to-
# COMMIT a producer may take and still be seen within a tick.
BAND_S = 1.0
# How often the newest id is noted while busy (the watermark must follow, or
# the first probe after a busy spell would scan all of it). Once a band: the
# mark then trails by two bands at most, a range scan of two seconds' live
# rows once, and a busy worker spends one query a second on it (at 0.25 s
# it was 0.8 of the 13 transactions per 1,000 deliveries, measured).
NOTE_S = BAND_S
ERROR_PAUSE_S = 1.0
# A probe takes a millisecond: one unanswered this long means the database
# went silent. The prober is then the worker's first task to say so.
PROBE_TIMEOUT_S = 3.0


class Prober:
    def __init__(
        self,
        url: str,
        wake: asyncio.Event,
        connectivity: Connectivity,
        *,
        busy: Callable[[], bool],
        tick_s: float = TICK_S,
        band_s: float = BAND_S,
    ) -> None:
        self._url = url
        self._conn: asyncpg.Connection | None = None
        self._wake = wake
        self._db = connectivity
        self._busy = busy
        self._tick_s = tick_s
        self._band_s = band_s
        # (monotonic time, newest id then), oldest first.
        self._tops: collections.deque[tuple[float, int]] = collections.deque()
        self._mark = -1  # the watermark; -1 until the first look
        # (mark, signature of the live rows above it) at the last probe
        self._base: tuple[int, tuple[int, str]] | None = None
        self.probes = 0
        self.mode = WakeMode.PROBE
        self._probing = asyncio.Event()  # set in probe mode; notify mode parks on it
        self._probing.set()

    def set_mode(self, mode: WakeMode) -> None:
        """The switch as the refresher last read it; a change is said once."""
        if mode is self.mode:
            return
        log.event("wake_mode", mode=mode.value, was=self.mode.value)
        self.mode = mode
        if mode is WakeMode.PROBE:
            self._probing.set()
        else:
            self._probing.clear()
        self._wake.set()  # rows may have come while neither way was watching

    @property
    def parked(self) -> bool:
        """True while it runs no query (notify mode)."""
        return not self._probing.is_set()

    def _note(self, now: float, top: int) -> None:
        if not self._tops or now - self._tops[-1][0] >= NOTE_S or top != self._tops[-1][1]:
            self._tops.append((now, top))

    def _advance(self, now: float) -> int:
        """The mark: the newest id seen at least a band ago."""
        while self._tops and now - self._tops[0][0] >= self._band_s:
            self._mark = self._tops.popleft()[1]
        return self._mark

    async def _connection(self) -> asyncpg.Connection:
        if self._conn is None or self._conn.is_closed():
            self._conn = await open_connection(self._url, command_timeout=PROBE_TIMEOUT_S)
        return self._conn

    async def step(self) -> None:
        now = time.monotonic()
        conn = await self._connection()
        if self._mark < 0:
            self._mark = await store.newest_id(conn)
            self._note(now, self._mark)
            return
        if self._busy():
            self._wake.set()
            self._advance(now)
            if not self._tops or now - self._tops[-1][0] >= NOTE_S:
                self._note(now, await store.newest_id(conn))
            return
        mark = self._advance(now)
        sig, top = await store.probe_new_rows(conn, mark)
        self.probes += 1
        self._note(now, top)
        # News when the rows above the same mark changed; a moved mark
        # counts as news too (a commit between the two probes would go
        # unseen otherwise): one claim at most per move.
        if self._base != (mark, sig):
            self._base = (mark, sig)
            self._wake.set()

    async def _park(self) -> None:
        """Notify mode: no connection, no query, no timer until probe mode."""
        self._drop()
        self._tops.clear()
        self._mark, self._base = -1, None  # learnt afresh when probing resumes
        await self._probing.wait()

    async def run(self) -> None:
        try:
            while True:
                if self.parked:
                    await self._park()
                await asyncio.sleep(self._tick_s)
                started = self._db.now()
                try:
                    await self.step()
                except DATABASE_ERRORS as exc:
                    self._db.failed("probe", exc, started=started)
                    self._drop()
                    await asyncio.sleep(ERROR_PAUSE_S)
                else:
                    self._db.ok(started=started, wrote=False)
        finally:
            self._drop()

    def _drop(self) -> None:
        if self._conn is not None:
            self._conn.terminate()
            self._conn = None
