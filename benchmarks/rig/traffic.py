"""The rig's steady stream of events and what the receiver saw of it.

Producer: enqueues `rate` events a second in small transactions through the
multi-host URL (so it follows the leader as a real producer would) and keeps
the ids whose commit returned: only those were acknowledged. Timeline: polls
the receiver's /stats a few times a second (counts per worker host). Owns its
database connection and its task; never retries a batch whose commit failed
(its fate is unknown, so it is neither acknowledged nor counted as lost).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Any

import aiohttp
import asyncpg

from dispatcher.db import DATABASE_ERRORS, open_connection
from dispatcher.db.catalog import enqueue_bulk

TICK_S = 0.05
CONNECT_TIMEOUT_S = 3.0
COMMAND_TIMEOUT_S = 5.0


async def _cancel(task: asyncio.Task[None] | None) -> None:
    """Cancels and awaits a task this module owns."""
    if task is not None:
        task.cancel()
        with contextlib.suppress(BaseException):
            await task


@dataclass
class Producer:
    url: str
    endpoint_id: int
    rate: int
    acked: dict[str, float] = field(default_factory=dict)  # event id -> time.time() of ack
    failed: int = 0  # events whose transaction failed (outcome unknown)
    phase: str = "warmup"
    running: bool = False
    _seq: int = 0
    _conn: asyncpg.Connection | None = None
    _task: asyncio.Task[None] | None = None
    # Held while a batch is on its way: pause() waits for it, so that the
    # acknowledged ids read after a pause are final.
    _busy: asyncio.Lock = field(default_factory=asyncio.Lock)

    def start(self, phase: str) -> None:
        self.check()
        self.phase, self.running = phase, True
        if self._task is None:
            self._task = asyncio.create_task(self._loop(), name="rig-producer")

    def check(self) -> None:
        """Raises what stopped the producer, if it stopped: a stream that
        silently ended would read as a stalled cluster."""
        if self._task is not None and self._task.done():
            raise RuntimeError(f"the rig's producer stopped: {self._task.exception()!r}")

    async def pause(self) -> None:
        self.running = False
        async with self._busy:
            pass

    def acked_in(self, phase: str) -> dict[str, float]:
        prefix = f"{phase}-"
        return {k: v for k, v in self.acked.items() if k.startswith(prefix)}

    async def _batch(self, n: int) -> None:
        if self._conn is None:
            self._conn = await open_connection(
                self.url, timeout=CONNECT_TIMEOUT_S, command_timeout=COMMAND_TIMEOUT_S
            )
        ids = [f"{self.phase}-{self._seq + i}" for i in range(n)]
        self._seq += n
        payload = json.dumps({"rig": True})
        try:
            await enqueue_bulk(
                self._conn, [(i, "rig.event", payload, self.endpoint_id) for i in ids]
            )
        except BaseException:
            self.failed += n
            raise
        now = time.time()
        for i in ids:
            self.acked[i] = now

    async def _loop(self) -> None:
        per_tick = max(1, round(self.rate * TICK_S))
        next_at = time.monotonic()
        while True:  # ends when close() cancels it
            next_at += TICK_S
            if self.running:
                try:
                    async with self._busy:
                        await self._batch(per_tick)
                except DATABASE_ERRORS:
                    # The leader is gone or read-only: reconnect next tick
                    # (the multi-host URL finds the writable one).
                    await self._drop_conn()
            delay = next_at - time.monotonic()
            if delay > 0:
                await asyncio.sleep(delay)
            else:
                next_at = time.monotonic()  # fell behind during an outage: no burst

    async def _drop_conn(self) -> None:
        if self._conn is not None:
            self._conn.terminate()
            self._conn = None

    async def close(self) -> None:
        await _cancel(self._task)
        self._task = None
        await self._drop_conn()


@dataclass
class Timeline:
    """The receiver's /stats, sampled every `every_s` seconds."""

    base: str  # http://rx:port
    session: aiohttp.ClientSession
    every_s: float = 0.2
    # Bounded: an hour of samples at 5 a second; a rig run takes minutes.
    samples: deque[tuple[float, dict[str, Any]]] = field(
        default_factory=lambda: deque(maxlen=18_000)
    )
    _task: asyncio.Task[None] | None = None

    async def stats(self) -> dict[str, Any]:
        async with self.session.get(self.base + "/stats") as resp:
            doc: dict[str, Any] = await resp.json()
            return doc

    async def arrivals(self) -> dict[str, float]:
        async with self.session.get(self.base + "/arrivals") as resp:
            doc: dict[str, float] = await resp.json()
            return doc

    def start(self) -> None:
        self._task = asyncio.create_task(self._loop(), name="rig-timeline")

    async def _loop(self) -> None:
        while True:  # ends when close() cancels it
            with contextlib.suppress(aiohttp.ClientError, TimeoutError, ValueError):
                self.samples.append((time.time(), await self.stats()))
            await asyncio.sleep(self.every_s)

    def peer_back_after(self, peer: str, t: float) -> float | None:
        """Seconds from t to the first sample after it in which `peer` had
        sent more POSTs than at t (None: it never did)."""
        base = None
        for ts, doc in self.samples:
            n = doc.get("peers", {}).get(peer, 0)
            if ts <= t:
                base = n
            elif base is not None and n > base:
                return ts - t
        return None

    def peer_quiet_s(self, peer: str, t0: float, t1: float) -> float:
        """The longest stretch within [t0, t1] in which `peer` sent nothing."""
        last_n, last_t, worst = None, t0, 0.0
        for ts, doc in self.samples:
            if ts < t0 or ts > t1:
                continue
            n = doc.get("peers", {}).get(peer, 0)
            if n != last_n:
                worst = max(worst, ts - last_t)
                last_n, last_t = n, ts
        return max(worst, t1 - last_t)

    async def close(self) -> None:
        await _cancel(self._task)
        self._task = None
