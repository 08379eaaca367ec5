"""`dispatcher run --processes 2`: two workers under one parent, a child
killed -9 restarted, SIGTERM to the parent stops them all with exit 0."""

from __future__ import annotations

import asyncio
import os
import signal
from collections import Counter

import asyncpg

from dispatcher.db import catalog
from tests.helpers import add_endpoint, statuses, until_received, worker
from tests.receivers import Receiver, delay


async def _live_pids(conn: asyncpg.Connection, n: int) -> list[int]:
    async def wait() -> list[int]:
        while True:
            pids = await conn.fetch(
                "SELECT pid FROM dispatcher_workers WHERE heartbeat_at > now() - interval '3 s'"
            )
            if len(pids) >= n:
                return [r["pid"] for r in pids]
            await asyncio.sleep(0.1)

    return await asyncio.wait_for(wait(), 30)


async def test_two_processes_restart_a_dead_one_and_stop_together(
    conn: asyncpg.Connection, db_url: str, receiver: Receiver
) -> None:
    receiver.routes["/r"] = delay(0.01)
    await add_endpoint(conn, receiver.url("/r"), max_in_flight=50)
    proc = await worker(db_url, "--processes", "2", "--max-in-flight", "20")
    try:
        pids = await _live_pids(conn, 2)
        assert proc.pid not in pids
        await catalog.enqueue_bulk(conn, [(f"a{i}", "t", "{}", None) for i in range(600)])
        await until_received(receiver, 300)
        os.kill(pids[0], signal.SIGKILL)
        # What the killed child held when it died: claimed rows whose
        # outcome it had not written (sent or not). Only these may go twice.
        held = await conn.fetchval(
            "SELECT count(*) FROM webhook_queue WHERE status = 'in_flight' AND locked_by ="
            " (SELECT worker_id FROM dispatcher_workers WHERE pid = $1)",
            pids[0],
        )
        await catalog.enqueue_bulk(conn, [(f"b{i}", "t", "{}", None) for i in range(600)])
        # Distinct ids, not a count: the killed child's rows that went out
        # go again when their lease ends, and may arrive before those it had
        # claimed but not sent.
        want = {f"a{i}" for i in range(600)} | {f"b{i}" for i in range(600)}

        async def all_arrived() -> None:
            while {r.headers["webhook-id"] for r in receiver.received} < want:
                await asyncio.sleep(0.1)

        await asyncio.wait_for(all_arrived(), 90)

        # A new child took the dead one's place.
        async def restarted() -> None:
            while len(set(await _live_pids(conn, 2)) - {pids[0]}) < 2:
                await asyncio.sleep(0.2)

        await asyncio.wait_for(restarted(), 30)
        proc.send_signal(signal.SIGTERM)
        await asyncio.wait_for(proc.wait(), 30)
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
    assert proc.returncode == 0
    children = set(await _live_pids(conn, 0))
    for pid in children:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            continue
        raise AssertionError(f"child {pid} still running")
    ids = Counter(r.headers["webhook-id"] for r in receiver.received)
    assert set(ids) == want
    # Only rows the killed child held may have gone twice: those in flight
    # (its window: 20) and those whose outcomes waited in its buffer for the
    # next flush (how many depends on the machine's load, so counted above
    # rather than assumed).
    assert sum(ids.values()) - len(ids) <= held
    # The killed child's rows (received, their outcomes lost with it) wait
    # for their lease and go again: nothing is lost.
    assert set(await statuses(conn)) <= {"delivered", "in_flight"}
