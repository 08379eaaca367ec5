"""The wake-up switch (schema 016): in `notify` mode the enqueue functions
NOTIFY once per call and an idle worker runs no probe; in `probe` mode
(the default) nothing changed: producers never NOTIFY and the worker probes.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

import asyncpg
import pytest

from dispatcher.core.models import WakeMode
from dispatcher.db import catalog, wake
from dispatcher.worker.engine import Engine
from dispatcher.worker.prober import Prober
from tests.helpers import FAST, add_endpoint, admin_api, engine
from tests.receivers import Receiver


async def _notifications(db_url: str, seen: list[str]) -> asyncpg.Connection:
    listener = await asyncpg.connect(db_url)
    await listener.add_listener("dispatcher_due", lambda *a: seen.append(str(a[2])))
    return listener


async def _settle(listener: asyncpg.Connection) -> None:
    """A round trip after the commits, so their notifications have come."""
    await listener.execute("SELECT 1")
    await asyncio.sleep(0.2)


async def test_switch_round_trips_and_tells_workers(conn: asyncpg.Connection, db_url: str) -> None:
    assert (await wake.read(conn))[0] is WakeMode.PROBE  # existing deployments: unchanged
    told: list[str] = []
    listener = await asyncpg.connect(db_url)
    await listener.add_listener("dispatcher_endpoints", lambda *a: told.append("refresh"))
    try:
        mode, at = await wake.write(conn, WakeMode.NOTIFY)
        assert mode is WakeMode.NOTIFY
        assert (await wake.read(conn)) == (WakeMode.NOTIFY, at)
        assert await conn.fetchval("SELECT wake FROM dispatcher_settings") == "notify"
        await _settle(listener)
    finally:
        await listener.close()
    assert told == ["refresh"]
    with pytest.raises(asyncpg.CheckViolationError):
        await conn.execute("UPDATE dispatcher_settings SET wake = 'sometimes'")
    with pytest.raises(asyncpg.UniqueViolationError):
        await conn.execute("INSERT INTO dispatcher_settings (wake) VALUES ('probe')")


async def test_notify_mode_notifies_once_per_call(conn: asyncpg.Connection, db_url: str) -> None:
    await add_endpoint(conn, "https://example.com/a", event_types=("t",))
    await add_endpoint(conn, "https://example.com/b", event_types=("t",))
    seen: list[str] = []
    listener = await _notifications(db_url, seen)
    try:
        await conn.fetchval("SELECT dispatcher_enqueue('t', '{}', 'probe-mode')")
        await catalog.enqueue_bulk(conn, [("bulk-probe", "t", "{}", None)])
        await _settle(listener)
        assert seen == []  # probe mode: producers never NOTIFY

        await wake.write(conn, WakeMode.NOTIFY)
        # One call, two rows: one notification.
        await conn.fetchval("SELECT dispatcher_enqueue('t', '{}', 'n1')")
        await _settle(listener)
        assert len(seen) == 1
        # Every overload and the application's function end in the same place.
        await conn.fetchval("SELECT dispatcher_enqueue('t', '{}'::jsonb, 'n2')")
        await conn.fetchval("SELECT dispatcher_enqueue('t', '{}'::text, 'n3')")
        await conn.fetchval("SELECT dispatcher_enqueue_app('default', 't', '{}', 'n4')")
        await _settle(listener)
        assert len(seen) == 4
        # Nothing queued, nothing due now, held: no notification.
        await conn.fetchval("SELECT dispatcher_enqueue('t', '{}', 'n1')")
        await conn.fetchval("SELECT dispatcher_enqueue('nobody-wants-it', '{}')")
        await conn.fetchval(
            "SELECT dispatcher_enqueue_app('default', 't', '{}', 'later',"
            " deliver_at => now() + interval '1 hour')"
        )
        await conn.fetchval(
            "SELECT dispatcher_enqueue_app('default', 't', '{}', 'h', hold => true)"
        )
        await _settle(listener)
        assert len(seen) == 4
        # Releasing held rows makes them due: one notification.
        await conn.fetchval("SELECT dispatcher_release_event('default', 'h')")
        # A transaction with many enqueues: one (PostgreSQL folds them).
        async with conn.transaction():
            for i in range(20):
                await conn.fetchval("SELECT dispatcher_enqueue('t', '{}', $1)", f"tx{i}")
        # The bulk COPY, one statement for many events: one.
        await catalog.enqueue_bulk(conn, [(f"bulk{i}", "t", "{}", None) for i in range(50)])
        await _settle(listener)
        assert len(seen) == 7

        await wake.write(conn, WakeMode.PROBE)
        await conn.fetchval("SELECT dispatcher_enqueue('t', '{}', 'back-to-probe')")
        await _settle(listener)
        assert len(seen) == 7
    finally:
        await listener.close()


def _prober(e: Engine) -> Prober:
    assert e._prober is not None
    return e._prober


async def _until(check: Callable[[], object], timeout: float = 10.0) -> None:
    end = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < end, "condition not reached in time"
        await asyncio.sleep(0.02)


async def _xacts(conn: asyncpg.Connection) -> int:
    """Transactions committed in this database so far (every statement the
    worker runs outside a transaction block is one): what it costs while idle."""
    n: int = await conn.fetchval(
        "SELECT xact_commit FROM pg_stat_database WHERE datname = current_database()"
    )
    return n


async def _idle_xacts_per_s(conn: asyncpg.Connection, seconds: float = 3.0) -> float:
    # Backends report their counts within about a second of going idle.
    await asyncio.sleep(1.2)
    before = await _xacts(conn)
    await asyncio.sleep(seconds)
    return (await _xacts(conn) - before) / seconds


async def test_notify_mode_idle_worker_wakes_on_enqueue_without_probing(
    conn: asyncpg.Connection, db_url: str, receiver: Receiver
) -> None:
    await add_endpoint(conn, receiver.url("/ok"))
    await wake.write(conn, WakeMode.NOTIFY)
    # A 30 s poll: only the producer's NOTIFY can deliver within the bound.
    e = engine(db_url, poll_interval_s=30.0, endpoint_refresh_s=1.0)
    task = asyncio.create_task(e.run())
    try:
        await _until(lambda: e.gates.ids)  # started and refreshed
        idle = await _idle_xacts_per_s(conn)
        prober = _prober(e)
        assert prober.parked and prober.mode is WakeMode.NOTIFY
        assert prober.probes == 0
        t0 = time.monotonic()
        await conn.fetchval("SELECT dispatcher_enqueue('t', '{\"n\": 1}', 'woken')")
        await asyncio.wait_for(receiver.arrived.wait(), 10)
        woke_s = time.monotonic() - t0
        assert prober.probes == 0
    finally:
        e.stop()
        await asyncio.wait_for(task, 10)
    assert [r.headers["webhook-id"] for r in receiver.received] == ["woken"]
    assert woke_s < 10
    # Each refresh is a few statements a second; the probe alone would be 100.
    assert idle < 20, f"{idle:.1f} transactions/s from an idle worker in notify mode"


async def test_probe_mode_unchanged_and_switch_followed_live(
    conn: asyncpg.Connection, db_url: str, receiver: Receiver
) -> None:
    await add_endpoint(conn, receiver.url("/ok"))
    e = engine(db_url, poll_interval_s=30.0, endpoint_refresh_s=1.0)
    task = asyncio.create_task(e.run())
    try:
        await _until(lambda: e.gates.ids)
        prober = _prober(e)
        assert prober.mode is WakeMode.PROBE and not prober.parked
        probing = await _idle_xacts_per_s(conn, 2.0)
        assert prober.probes > 20
        await conn.fetchval("SELECT dispatcher_enqueue('t', '{}', 'probed')")
        await asyncio.wait_for(receiver.arrived.wait(), 10)
        receiver.arrived.clear()

        # Switched while running: the worker hears it (a trigger's NOTIFY)
        # long before its next periodic refresh would matter, and parks.
        await wake.write(conn, WakeMode.NOTIFY)
        await _until(lambda: prober.parked, 5.0)
        probes = prober.probes
        await conn.fetchval("SELECT dispatcher_enqueue('t', '{}', 'notified')")
        await asyncio.wait_for(receiver.arrived.wait(), 10)
        receiver.arrived.clear()
        # At most the one probe that was out when it parked lands after.
        assert prober.probes <= probes + 1

        await wake.write(conn, WakeMode.PROBE)
        await _until(lambda: not prober.parked, 5.0)
        await _until(lambda: prober.probes > probes + 5, 5.0)
        await conn.fetchval("SELECT dispatcher_enqueue('t', '{}', 'probed-again')")
        await asyncio.wait_for(receiver.arrived.wait(), 10)
    finally:
        e.stop()
        await asyncio.wait_for(task, 10)
    ids = [r.headers["webhook-id"] for r in receiver.received]
    assert ids == ["probed", "notified", "probed-again"]
    assert probing > 30, f"only {probing:.1f} transactions/s from a probing worker"


async def test_admin_api_reads_and_sets_the_switch(conn: asyncpg.Connection, db_url: str) -> None:
    async with admin_api(db_url, FAST) as (s, base):
        async with s.get(f"{base}/v1/settings/wake") as r:
            assert r.status == 200
            assert (await r.json())["wake"] == "probe"
        async with s.put(f"{base}/v1/settings/wake", json={"wake": "notify"}) as r:
            assert r.status == 200
            doc = await r.json()
        assert doc["wake"] == "notify"
        assert await conn.fetchval("SELECT wake FROM dispatcher_settings") == "notify"
        for bad in ({"wake": "sometimes"}, {}, {"wake": "probe", "extra": 1}):
            async with s.put(f"{base}/v1/settings/wake", json=bad) as r:
                assert r.status in (400, 422), bad
                assert "error" in await r.json()
    assert await conn.fetchval("SELECT wake FROM dispatcher_settings") == "notify"
