"""Slots: coroutines that run the engine's claimed rows one after another.

A task per row would cost a task's creation, scheduling and done callback
per delivery; a slot that finishes a row takes the next at once, with no
trip through the event loop, and parks when none is ready. Every row still
gets a slot free to run it the moment it is started (a parked one or a new
one), so a slot waiting for its endpoint's place or token holds up only
its own row.

The rows are the engine's business: `run(job)` does one whole job (send,
resolve) and lets only CancelledError out.
"""

from __future__ import annotations

import asyncio
import collections
from collections.abc import Awaitable, Callable
from typing import Any, Generic, TypeVar

J = TypeVar("J")


class Slots(Generic[J]):
    def __init__(self, run: Callable[[J], Awaitable[None]], keep: Callable[[], int]) -> None:
        self._run = run
        self._keep = keep  # parked slots kept after a burst: the window
        self._stopping = False
        # Each slot's job, None while it has none.
        self._slots: dict[asyncio.Task[None], J | None] = {}
        self._ready: collections.deque[J] = collections.deque()
        self._parked: list[asyncio.Future[None]] = []

    def start(self, job: J) -> None:
        self._ready.append(job)
        while self._parked:
            parked = self._parked.pop()
            if not parked.done():
                parked.set_result(None)
                return
        slot = asyncio.create_task(self._slot())
        self._slots[slot] = None

    async def _slot(self) -> None:
        me = asyncio.current_task()
        assert me is not None
        loop = asyncio.get_running_loop()
        try:
            while True:
                while self._ready:
                    job = self._slots[me] = self._ready.popleft()
                    try:
                        await self._run(job)
                    finally:
                        self._slots[me] = None
                # Slots beyond the window are not kept waiting after a burst.
                if self._stopping or len(self._parked) >= self._keep():
                    return
                parked = loop.create_future()
                self._parked.append(parked)
                await parked
        finally:
            self._slots.pop(me, None)  # stop() may have forgotten it already

    def take_ready(self) -> list[J]:
        """The jobs no slot has taken yet; from now on slots park no more."""
        self._stopping = True
        ready = list(self._ready)
        self._ready.clear()
        return ready

    async def stop(
        self, started: Callable[[J], bool], grace_s: float, cut: asyncio.Event | None = None
    ) -> None:
        """Cancels the slots that are idle or whose job has not `started`;
        gives those mid-job `grace_s` to finish (or until `cut` is set),
        then cancels them too."""
        self._stopping = True
        for t, job in list(self._slots.items()):
            if job is None or not started(job):
                t.cancel()
        busy = {t for t, job in self._slots.items() if job is not None and not t.done()}
        if busy and (cut is None or not cut.is_set()):
            finished = asyncio.create_task(asyncio.wait(busy), name="dispatcher-slots-finish")
            waits: set[asyncio.Future[Any]] = {finished}
            if cut is not None:
                waits.add(asyncio.create_task(cut.wait(), name="dispatcher-slots-cut"))
            try:
                await asyncio.wait(waits, timeout=grace_s, return_when=asyncio.FIRST_COMPLETED)
            finally:
                for w in waits:
                    w.cancel()
                await asyncio.gather(*waits, return_exceptions=True)
        for t in list(self._slots):
            t.cancel()
        if self._slots:
            await asyncio.wait(set(self._slots), timeout=5)
        # A slot cancelled before its first step never ran its `finally`.
        self._slots.clear()
