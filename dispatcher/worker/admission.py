"""Admission to the wire: how a claimed row gets one of its endpoint's places.

A gate (gate.Gate) holds its endpoint's in-flight places as `Places`: rows
on the wire count in `sending`, rows claimed ahead wait in `waiting`, first
come first served, and a place that frees is handed to the next of them as
it frees. `Admission` is one row's turn: a place, then a token of the
gate's bucket, then the last look (paused, breaker, stopping) before it is
sent. What the gate answers (how many places, sendable or not) is the
gate's; this module only keeps the places and the turn.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import time
from collections.abc import Callable
from typing import Protocol

from dispatcher.core.models import Delivery
from dispatcher.core.sendorder import SendOrder
from dispatcher.worker.bucket import Bucket

# A row claimed ahead waits this long at most for a place, then goes back.
PLACE_WAIT_S = 1.0


class Places:
    """An endpoint's in-flight places in this process: those held
    (`sending`) and the rows waiting for one, in order. How many there are
    is the subclass's `places()`."""

    __slots__ = ("_expiry", "sending", "waiting")

    def __init__(self) -> None:
        # Rows holding an in-flight place (see places()), and rows claimed
        # ahead waiting for one, first come first served, each with the
        # loop time its wait ends. Every row waits PLACE_WAIT_S, so those
        # times rise along the queue: one timer, `_expiry`, set for the
        # first of them, serves the whole queue (not one per row: a heap
        # push and a cancel for each row that waits).
        self.sending = 0
        self.waiting: collections.deque[tuple[float, asyncio.Future[bool]]] = collections.deque()
        self._expiry: asyncio.TimerHandle | None = None

    def places(self) -> int:
        raise NotImplementedError

    async def wait_for_place(self) -> bool:
        """Waits, in turn, for an in-flight place (place_freed hands it
        over, counted in `sending`); False when none came free within
        PLACE_WAIT_S: the row, claimed ahead, goes back unspent rather than
        eat into its lease. (Not asyncio.wait_for: before 3.12 it swallows a
        cancel that arrives with the place, and a stopping worker's row
        would then go out.)"""
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[bool] = loop.create_future()
        entry = (loop.time() + PLACE_WAIT_S, fut)
        self.waiting.append(entry)
        if self._expiry is None:
            self._expiry = loop.call_at(entry[0], self._expire_due, loop)
        try:
            return await fut
        except BaseException:
            if _handed_over(fut):
                self.sending -= 1  # handed over as it was cancelled: give it back
                self.place_freed()
            raise
        finally:
            # place_freed and _expire_due take out the rows they answer; a
            # cancelled one is queued still, unless either skipped past it.
            if fut.cancelled():
                with contextlib.suppress(ValueError):
                    self.waiting.remove(entry)

    def _expire_due(self, loop: asyncio.AbstractEventLoop) -> None:
        """The queue's timer: the rows whose wait is over go back; set again
        for the next row's end, if any waits."""
        now = loop.time()
        waiting = self.waiting
        while waiting and waiting[0][0] <= now:
            _, fut = waiting.popleft()
            if not fut.done():
                fut.set_result(False)
        self._expiry = loop.call_at(waiting[0][0], self._expire_due, loop) if waiting else None

    def place_freed(self) -> None:
        """Hands free places to the rows waiting, in order. Counted here, as
        the place changes hands, so that no row arriving before the woken
        one resumes can take it too."""
        while self.waiting and self.sending < self.places():
            _, fut = self.waiting.popleft()
            if not fut.done():
                self.sending += 1
                fut.set_result(True)


class Admits(Protocol):
    """What an admission asks of its gate (gate.Gate is one)."""

    sending: int
    waiting: collections.deque[tuple[float, asyncio.Future[bool]]]
    limiter: Bucket | None
    order: SendOrder

    def places(self) -> int: ...
    def sendable(self) -> bool: ...
    def paused_for(self, now: float | None = None) -> float: ...
    async def wait_for_place(self) -> bool: ...
    def place_freed(self) -> None: ...


class Admission:
    """One row's turn at its endpoint's in-flight places: `now()`, else
    `await wait()`, then `leave()` once the row is sent; or `async with
    gate.admit(d, stopping) as admitted`, which does the same. Admitted
    (True), the row holds a place, has had a token of the bucket, passed
    the last look (not paused, its breaker admits it, the worker is not
    stopping), and is marked started in the send order. A class, not a
    generator-based context manager: one is made per delivery, on the hot
    path, where `now()` also spares the two coroutines `async with` makes."""

    __slots__ = ("_d", "_gate", "_placed", "_stopping")

    def __init__(self, gate: Admits, d: Delivery, stopping: Callable[[], bool]) -> None:
        self._gate = gate
        self._d = d
        self._stopping = stopping
        self._placed = False

    def now(self) -> bool | None:
        """The turn without waiting: whether the row may go, when a place is
        free and no token is to be taken. None, with nothing taken, when it
        has to `wait`."""
        gate = self._gate
        if gate.waiting or gate.sending >= gate.places():
            return None
        if gate.limiter is not None and gate.sendable():
            return None
        gate.sending += 1
        self._placed = True
        return self._last_look()

    async def wait(self) -> bool:
        """The turn: a place (in order), then a token. Cancelled, it leaves
        the place it got."""
        gate = self._gate
        if gate.sending < gate.places() and not gate.waiting:
            gate.sending += 1
        elif not await gate.wait_for_place():  # a place handed over is counted
            return False  # claimed ahead, and no place came free in time: handed back
        self._placed = True
        try:
            if gate.limiter is not None and gate.sendable():
                await gate.limiter.acquire()
        except BaseException:
            self.leave()
            raise
        return self._last_look()

    def _last_look(self) -> bool:
        gate = self._gate
        if self._stopping() or not gate.sendable() or gate.paused_for() > 0:
            return False
        self._d.started = True
        self._d.seq = gate.order.sent(time.monotonic())
        return True

    def leave(self) -> None:
        """The place given back, if one was taken (call it in a `finally`)."""
        if self._placed:
            self._placed = False
            self._gate.sending -= 1
            self._gate.place_freed()

    async def __aenter__(self) -> bool:
        admitted = self.now()
        return await self.wait() if admitted is None else admitted

    async def __aexit__(self, *_: object) -> None:
        self.leave()


def _handed_over(fut: asyncio.Future[bool]) -> bool:
    return fut.done() and not fut.cancelled() and fut.result()
