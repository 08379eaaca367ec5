"""Worker processes as they run in production: killed, terminated, side by side."""

from __future__ import annotations

import asyncio
import signal
from collections import Counter

import asyncpg

from dispatcher.db import catalog
from tests.helpers import add_endpoint, statuses, until_received, worker
from tests.receivers import Receiver, delay


async def _bulk(conn: asyncpg.Connection, n: int) -> None:
    await catalog.enqueue_bulk(conn, [(f"e{i}", "t", f'{{"i": {i}}}', None) for i in range(n)])


async def _expire_leases(conn: asyncpg.Connection) -> None:
    wait = await conn.fetchval(
        "SELECT greatest(0, extract(epoch FROM max(next_attempt_at) - now()))::float8"
        " FROM webhook_queue WHERE status = 'in_flight'"
    )
    if wait:
        assert wait < 15
        await asyncio.sleep(wait + 0.2)


def _ids(receiver: Receiver) -> Counter[str]:
    return Counter(r.headers["webhook-id"] for r in receiver.received)


async def test_kill_9_loses_nothing(conn: asyncpg.Connection, db_url: str,
                                    receiver: Receiver) -> None:  # fmt: skip
    receiver.routes["/slow"] = delay(0.1)
    await add_endpoint(conn, receiver.url("/slow"), max_in_flight=20, timeout_ms=2000)
    await _bulk(conn, 400)
    proc = await worker(db_url)
    try:
        await until_received(receiver, 100)
    finally:
        proc.kill()
        await proc.wait()
    in_flight_at_kill = {
        r["event_id"]
        for r in await conn.fetch("SELECT event_id FROM webhook_queue WHERE status='in_flight'")
    }
    assert in_flight_at_kill, "the kill should have caught rows in flight"
    await _expire_leases(conn)
    proc = await worker(db_url, "--drain")
    assert await asyncio.wait_for(proc.wait(), 60) == 0
    assert await statuses(conn) == {"delivered": 400}
    ids = _ids(receiver)
    assert set(ids) == {f"e{i}" for i in range(400)}
    duplicated = {k for k, v in ids.items() if v > 1}
    assert duplicated <= in_flight_at_kill


async def test_sigterm_finishes_in_flight_and_exits_zero(
    conn: asyncpg.Connection, db_url: str, receiver: Receiver
) -> None:
    receiver.routes["/slow"] = delay(0.1)
    await add_endpoint(conn, receiver.url("/slow"), max_in_flight=20, timeout_ms=2000)
    await _bulk(conn, 400)
    proc = await worker(db_url)
    await until_received(receiver, 100)
    proc.send_signal(signal.SIGTERM)
    _, err = await asyncio.wait_for(proc.communicate(), 30)
    assert proc.returncode == 0, err.decode()[-500:]
    assert b"Traceback" not in err
    counts = await statuses(conn)
    assert "in_flight" not in counts
    assert counts.get("delivered", 0) >= 100
    assert counts.get("delivered", 0) + counts.get("pending", 0) == 400
    # Nothing handed back was spent, and what was sent was recorded once.
    assert await conn.fetchval("SELECT max(attempt_count) FROM webhook_queue") == 1
    assert max(_ids(receiver).values()) == 1
    proc = await worker(db_url, "--drain")
    assert await asyncio.wait_for(proc.wait(), 60) == 0
    assert await statuses(conn) == {"delivered": 400}
    ids = _ids(receiver)
    assert len(ids) == 400 and max(ids.values()) == 1


async def test_two_workers_send_each_event_once(
    conn: asyncpg.Connection, db_url: str, receiver: Receiver
) -> None:
    await add_endpoint(conn, receiver.url("/ok"), max_in_flight=50)
    await add_endpoint(conn, receiver.url("/ok2"), max_in_flight=50)
    await _bulk(conn, 1500)
    procs = [await worker(db_url, "--drain") for _ in range(2)]
    try:
        codes = await asyncio.wait_for(asyncio.gather(*(p.wait() for p in procs)), 90)
    finally:
        for p in procs:
            if p.returncode is None:
                p.kill()
    assert codes == [0, 0]
    assert await statuses(conn) == {"delivered": 3000}
    per_path = Counter((r.path, r.headers["webhook-id"]) for r in receiver.received)
    assert len(per_path) == 3000
    assert max(per_path.values()) == 1
