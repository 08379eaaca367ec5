"""Timeouts for thousands of requests in flight from one timer.

aiohttp's per-request timeout arms a loop timer for every request and
cancels it when the answer comes: two heap operations and four objects per
attempt, on the hottest path of the process. Here an attempt is entered in
the bucket of the tick its deadline falls in (a set add), and one sweeper,
waking once a tick while anything is watched, cancels the tasks of the
buckets that have come due. A deadline fires at most one tick late, never
early.

The cancellation is the one asyncio.timeout() uses: the watched task gets
CancelledError at the await it is suspended at, and `expired` tells the
code that caught it whether the sweeper sent it (a timeout: the task is
uncancelled) or someone else did (shutdown: it propagates). Library code
may swallow a cancellation (aiohappyeyeballs does, while it tidies up the
losing connection attempts), so a fired watch is cancelled again every tick
until the attempt ends; `done` takes back the cancels nobody saw, so a slot
running row after row never carries one over to the next.
"""

from __future__ import annotations

import asyncio
import heapq
import math

# A deadline fires within this much after it passes.
TICK_S = 0.02


class Watch:
    __slots__ = ("bucket", "fires", "task")

    def __init__(self, task: asyncio.Task[object], bucket: int) -> None:
        self.task = task
        self.bucket = bucket
        self.fires = 0  # cancels sent to the task and not yet taken back


class Deadlines:
    def __init__(self, tick_s: float = TICK_S) -> None:
        self._tick = tick_s
        self._buckets: dict[int, set[Watch]] = {}
        self._due: list[int] = []  # heap of the buckets' ticks
        self._fired: set[Watch] = set()  # past their deadline, attempt not ended yet
        self._live = 0  # watches not yet done or expired
        self._watching = asyncio.Event()

    def watch(self, timeout_s: float) -> Watch:
        """Cancels the current task once `timeout_s` has passed, unless
        `done` is called first."""
        task = asyncio.current_task()
        assert task is not None, "watch() from a task"
        loop = task.get_loop()
        bucket = math.ceil((loop.time() + timeout_s) / self._tick)
        w = Watch(task, bucket)
        members = self._buckets.get(bucket)
        if members is None:
            members = self._buckets[bucket] = set()
            heapq.heappush(self._due, bucket)
        if not self._watching.is_set():
            self._watching.set()
        members.add(w)
        self._live += 1
        return w

    def done(self, w: Watch) -> None:
        """The attempt ended (call it in a `finally`)."""
        self._forget(w)
        if w.fires:  # most attempts end before their deadline: nothing to take back
            self._take_back(w)

    def expired(self, w: Watch) -> bool:
        """After CancelledError: True when it was this deadline's (the task is
        uncancelled), False when it must propagate."""
        if not w.fires:
            return False
        self._forget(w)
        # Asked once per cancellation, wherever it is caught; another cancel
        # on top of ours (shutdown) still propagates.
        return self._take_back(w) == 0

    def _forget(self, w: Watch) -> None:
        """Watched no more: out of its bucket, or of the fired set."""
        members = self._buckets.get(w.bucket)
        if members is not None and w in members:
            members.remove(w)
            self._live -= 1
        elif w in self._fired:
            self._fired.remove(w)
            self._live -= 1

    @staticmethod
    def _take_back(w: Watch) -> int:
        """Withdraws this watch's cancels; returns the task's remaining ones."""
        left = w.task.cancelling()
        for _ in range(w.fires):
            left = w.task.uncancel()
        w.fires = 0
        return left

    @property
    def watched(self) -> int:
        return self._live

    async def run(self) -> None:
        """The sweeper: runs for the life of the process."""
        loop = asyncio.get_running_loop()
        while True:
            if not self._live:
                # Buckets emptied by done() would otherwise keep the sweeper
                # ticking until their (far) deadlines: an idle worker's CPU.
                self._buckets.clear()
                self._due.clear()
                self._watching.clear()
                await self._watching.wait()
            await asyncio.sleep(self._tick)
            now = math.floor(loop.time() / self._tick)
            # Again for those whose cancel went unseen (swallowed) a tick ago.
            for w in self._fired:
                w.fires += 1
                w.task.cancel()
            while self._due and self._due[0] <= now:
                for w in self._buckets.pop(heapq.heappop(self._due), ()):
                    w.fires += 1
                    w.task.cancel()
                    self._fired.add(w)
