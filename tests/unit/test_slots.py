"""Slots on a real event loop, no I/O: every job gets a slot at once, a
blocked job holds up no other, and stop() sorts jobs by how far they got."""

from __future__ import annotations

import asyncio

from dispatcher.worker.slots import Slots


async def test_a_blocked_job_holds_up_no_other() -> None:
    gate = asyncio.Event()
    done: list[str] = []

    async def run(job: str) -> None:
        if job.startswith("blocked"):
            await gate.wait()
        else:
            await asyncio.sleep(0)
        done.append(job)

    slots: Slots[str] = Slots(run, keep=lambda: 100)
    for j in ("blocked-1", "a", "blocked-2", "b", "c"):
        slots.start(j)
    for _ in range(20):
        await asyncio.sleep(0)
    assert sorted(done) == ["a", "b", "c"]
    gate.set()
    for _ in range(20):
        await asyncio.sleep(0)
    assert sorted(done) == ["a", "b", "blocked-1", "blocked-2", "c"]
    await slots.stop(lambda _: True, grace_s=1)


async def test_slots_are_reused_and_parked_ones_bounded() -> None:
    ran: list[int] = []

    async def run(job: int) -> None:
        await asyncio.sleep(0)
        ran.append(job)

    slots: Slots[int] = Slots(run, keep=lambda: 2)
    for i in range(5):
        slots.start(i)
    assert len(slots._slots) == 5  # a burst: a slot each, at once
    await asyncio.sleep(0.01)
    kept = set(slots._slots)
    assert len(kept) == 2 and len(slots._parked) == 2  # the rest went away
    for i in range(5, 7):
        slots.start(i)
        await asyncio.sleep(0.01)
    assert set(slots._slots) == kept  # the parked slots ran these
    assert sorted(ran) == list(range(7))
    await slots.stop(lambda _: True, grace_s=1)


async def test_stop_hands_back_sorts_and_waits() -> None:
    release = asyncio.Event()
    cancelled: list[str] = []
    finished: list[str] = []

    async def run(job: str) -> None:
        try:
            if job == "mid-request":
                await release.wait()
            else:
                await asyncio.sleep(30)
        except asyncio.CancelledError:
            cancelled.append(job)
            raise
        finished.append(job)

    slots: Slots[str] = Slots(run, keep=lambda: 10)
    slots.start("mid-request")
    slots.start("waiting")
    await asyncio.sleep(0)
    slots._ready.append("never taken")  # as if claimed after the slots ran
    assert slots.take_ready() == ["never taken"]
    stopping = asyncio.create_task(slots.stop(lambda j: j == "mid-request", grace_s=5))
    await asyncio.sleep(0.01)
    assert cancelled == ["waiting"]  # not started: back at once
    release.set()  # the one mid-request finishes within the grace period
    await stopping
    assert finished == ["mid-request"] and cancelled == ["waiting"]
