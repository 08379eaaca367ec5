"""The rewriter: keeps the outcomes this worker wrote in the last seconds and,
on a server that did not acknowledge them (a standby promoted after the
primary failed, or a restarted server), writes them again before the
connection is used for anything else.

It owns the kept outcomes and the identity of the server the worker writes
to. Every new pooled connection passes through `connected` (the pool's init
hook), so no claim, flush or refresh runs on a new server before its
rewrite: rows whose outcome the new server lacks are not sent again. The
policy (what to keep, what to write again, what was lost) is
core/failover.py; the SQL is the store's `rewrite_outcomes`.

What it never does: fold breakers (the new server's breaker takes the
results that follow) or count what it writes again as delivered (the
recorder counted it once, when it was first written). What the lost flushes
announced (a dead letter, a 410's disable) is announced again only for the
rows and endpoints the rewrite itself changed.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import deque
from collections.abc import Callable

import asyncpg

from dispatcher import log
from dispatcher.core import failover, opsevents
from dispatcher.core.models import Outcome
from dispatcher.db import Conn, one_line, refuses_writes, store


class Rewriter:
    def __init__(
        self,
        *,
        worker: str,
        keep_s: float,
        keep_max: int = failover.KEEP_MAX,
        ops_webhooks: Callable[[], frozenset[int]] = frozenset,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.worker = worker
        self._keep_s = keep_s
        self._keep_max = keep_max
        self._ops_webhooks = ops_webhooks
        self._clock = clock
        self._written: deque[failover.Written] = deque()
        self._total = 0  # outcomes in _written
        self._lock = asyncio.Lock()
        # The server the last new connection reached: what the recorder's
        # flushes are tagged with. Connections opened earlier go to it too
        # or are dead (a failover or a restart closes them).
        self.server: str | None = None
        self.rewritten = 0  # rows written again, over the worker's life

    @property
    def kept(self) -> int:
        return self._total

    def wrote(self, outcomes: list[Outcome]) -> None:
        """A flush committed these outcomes (on `server`)."""
        now = self._clock()
        batch = failover.kept(outcomes)
        if batch:
            self._written.append(failover.Written(self.server, now, batch))
            self._total += len(batch)
        drop = failover.expired(self._written, total=self._total, now=now,
                                keep_s=self._keep_s, keep_max=self._keep_max)  # fmt: skip
        for _ in range(drop):
            self._total -= len(self._written.popleft().outcomes)

    async def connected(self, conn: Conn) -> None:
        """A new pooled connection: on a server other than the one that
        acknowledged kept outcomes, they are written again first."""
        identity = await store.server_identity(conn)
        async with self._lock:
            now = self._clock()
            rewrites = failover.to_rewrite(self._written, server=identity, now=now)
            if rewrites:
                await self._rewrite(conn, rewrites, identity)
                # The new server holds them all now, as written or as found.
                self._written = deque(w._replace(server=identity) for w in self._written)
            if self.server is not None and self.server != identity:
                log.event("database_server_changed", was=self.server, now=identity)
            self.server = identity

    async def _rewrite(self, conn: Conn, rewrites: list[failover.Rewrite], identity: str) -> None:
        try:
            async with conn.transaction():
                before = await store.rewrite_outcomes(conn, rewrites, self.worker)
                lost = failover.applied(rewrites, before)
                gone = sorted({o.endpoint_id for o in lost if o.disable_endpoint})
                disabled = await store.disable_gone(conn, gone) if gone else []
                ops = self._ops_webhooks()
                events = opsevents.of_flush(lost, disabled, [], ops) if ops else []
                if events:
                    await store.ops_emit(conn, events)
        except asyncpg.PostgresError as exc:
            if refuses_writes(exc):
                raise  # read-only or out of disk: the next connection tries again
            # (A failed connection raises another error: the next one tries
            # again.) A statement this server refuses is not worth a worker that
            # cannot connect: the kept rows may go out again, as without it.
            log.event("outcomes_rewrite_failed", logging.ERROR, server=identity,
                      kept=len(rewrites), error=one_line(exc)[:200])  # fmt: skip
            return
        self.rewritten += len(before)
        log.event("outcomes_rewritten", logging.WARNING, server=identity,
                  kept=len(rewrites), rewritten=len(before))  # fmt: skip
