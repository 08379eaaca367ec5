"""Deadlines: one sweeper ends the attempts that outlive their timeout.

Real tasks on a real event loop, no I/O. Only lower bounds on time are
asserted (a deadline never fires early, by construction); how late it may
fire depends on the machine, so it is not asserted.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

import pytest

from dispatcher.worker.deadlines import Deadlines, Watch

TICK = 0.005


@pytest.fixture
async def deadlines() -> AsyncIterator[Deadlines]:
    d = Deadlines(tick_s=TICK)
    sweeper = asyncio.create_task(d.run())
    yield d
    sweeper.cancel()
    with pytest.raises(asyncio.CancelledError):
        await sweeper


async def _attempt(d: Deadlines, timeout_s: float, work_s: float) -> tuple[str, float]:
    """Like Sender.post: watch, work, tell a timeout from other cancels."""
    loop = asyncio.get_running_loop()
    t0 = loop.time()
    w = d.watch(timeout_s)
    try:
        await asyncio.sleep(work_s)
    except asyncio.CancelledError:
        if not d.expired(w):
            raise
        return "timeout", loop.time() - t0
    finally:
        d.done(w)
    return "done", loop.time() - t0


async def test_an_attempt_past_its_timeout_is_ended_never_early(deadlines: Deadlines) -> None:
    for timeout in (0.0, 0.001, 0.013, 0.05):
        task = asyncio.create_task(_attempt(deadlines, timeout, 30))
        what, took = await task
        assert what == "timeout"
        assert took >= timeout
        # Uncancelled: the task can go on using timeouts of its own.
        assert task.cancelling() == 0
    assert deadlines.watched == 0


async def test_an_attempt_that_finishes_in_time_is_left_alone(deadlines: Deadlines) -> None:
    results = await asyncio.gather(*(_attempt(deadlines, 0.2, 0.001 * i) for i in range(50)))
    assert [r[0] for r in results] == ["done"] * 50
    assert deadlines.watched == 0
    # Nothing fires later for a watch that was done.
    await asyncio.sleep(0.25)


async def test_the_task_goes_on_after_a_timeout(deadlines: Deadlines) -> None:
    async def two() -> list[str]:
        first = (await _attempt(deadlines, 0.01, 30))[0]
        second = (await _attempt(deadlines, 5, 0.01))[0]
        await asyncio.sleep(0.02)  # no cancellation left pending
        return [first, second]

    assert await two() == ["timeout", "done"]


async def test_a_cancel_that_is_not_the_deadline_propagates(deadlines: Deadlines) -> None:
    task = asyncio.create_task(_attempt(deadlines, 5, 30))
    await asyncio.sleep(0.01)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert deadlines.watched == 0


async def test_shutdown_on_top_of_a_deadline_still_propagates(deadlines: Deadlines) -> None:
    """Both cancels land before the task runs again: the timeout must not
    swallow the shutdown's, wherever the code catches it."""
    watches: list[Watch] = []

    async def nested() -> str:
        w = deadlines.watch(30)
        watches.append(w)
        try:
            try:
                await asyncio.sleep(30)
            except asyncio.CancelledError:
                if not deadlines.expired(w):
                    raise
                return "inner timeout"
        except asyncio.CancelledError:
            if not deadlines.expired(w):
                raise
            return "outer timeout"
        finally:
            deadlines.done(w)
        return "done"

    task = asyncio.create_task(nested())
    await asyncio.sleep(0.01)
    # What the sweeper does when the deadline passes, then a shutdown's
    # cancel, both before the task runs again.
    w = watches[0]
    w.fires += 1
    w.task.cancel()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task


async def test_a_swallowed_deadline_is_sent_again(deadlines: Deadlines) -> None:
    """Library code that swallows a cancellation (aiohappyeyeballs does)
    must not leave the attempt without a timeout."""

    async def swallowing() -> tuple[str, int]:
        me = asyncio.current_task()
        assert me is not None
        w = deadlines.watch(0.01)
        try:
            with contextlib.suppress(asyncio.CancelledError):
                await asyncio.sleep(30)  # the first cancel dies here
            await asyncio.sleep(30)
        except asyncio.CancelledError:
            if not deadlines.expired(w):
                raise
            return "timeout", me.cancelling()
        finally:
            deadlines.done(w)
        return "done", me.cancelling()

    assert await asyncio.wait_for(swallowing(), 5) == ("timeout", 0)
    assert deadlines.watched == 0


async def test_an_unseen_deadline_is_taken_back_when_the_attempt_ends(
    deadlines: Deadlines,
) -> None:
    """A cancel swallowed just before the attempt finished anyway must not
    be carried over to the task's next attempt."""

    async def slot() -> list[str]:
        me = asyncio.current_task()
        assert me is not None
        w = deadlines.watch(0.01)
        try:
            with contextlib.suppress(asyncio.CancelledError):
                await asyncio.sleep(30)
        finally:
            deadlines.done(w)
        assert me.cancelling() == 0
        # The next attempt of the same task times out as a timeout, not as
        # a shutdown.
        return [(await _attempt(deadlines, 0.01, 30))[0], (await _attempt(deadlines, 5, 0))[0]]

    assert await asyncio.wait_for(slot(), 5) == ["timeout", "done"]


async def test_the_sweeper_sleeps_when_nothing_is_watched(deadlines: Deadlines) -> None:
    await asyncio.sleep(TICK * 4)
    assert deadlines.watched == 0
    # Watching again wakes it: the deadline still fires.
    assert (await _attempt(deadlines, 0.01, 30))[0] == "timeout"


async def test_the_sweeper_stops_ticking_once_every_attempt_has_ended(
    deadlines: Deadlines,
) -> None:
    """An attempt that ended leaves an empty bucket due far ahead (its
    timeout); an idle worker must not tick until then."""
    assert (await _attempt(deadlines, 30, 0.001))[0] == "done"
    await asyncio.sleep(TICK * 4)
    assert deadlines.watched == 0
    assert deadlines._due == [] and deadlines._buckets == {}
