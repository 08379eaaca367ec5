"""Faults a production worker meets: lost database connections, a database
outage, receivers that reset, hang or cut their answers short."""

from __future__ import annotations

import asyncio
import contextlib
import random
import shutil
import signal
import tempfile
from collections import Counter
from collections.abc import Iterator
from typing import Any

import asyncpg
import orjson
import pytest

from dispatcher import db
from dispatcher.core.errors import OperationalError
from dispatcher.db import catalog
from dispatcher.worker.engine import Engine
from tests.helpers import add_endpoint, engine, statuses, until_received, worker
from tests.pgproxy import PgProxy
from tests.receivers import Receiver, delay

N = 3000


async def _bulk(conn: asyncpg.Connection, n: int, prefix: str = "e") -> None:
    await catalog.enqueue_bulk(
        conn, [(f"{prefix}{i}", "t", f'{{"i": {i}}}', None) for i in range(n)]
    )


async def _until(conn: asyncpg.Connection, delivered: int, timeout: float = 90.0) -> None:
    async def wait() -> None:
        while (await statuses(conn)).get("delivered", 0) < delivered:
            await asyncio.sleep(0.1)

    await asyncio.wait_for(wait(), timeout)


def _ids(receiver: Receiver) -> Counter[str]:
    return Counter(r.headers["webhook-id"] for r in receiver.received)


async def _deliver_all(conn: asyncpg.Connection, db_url: str, n: int) -> Engine:
    """Runs one worker until all n are delivered (retries included), then stops it."""
    e = engine(db_url, max_in_flight=100)
    task = asyncio.create_task(e.run())
    try:
        await _until(conn, n, timeout=120)
    finally:
        e.stop()
        await asyncio.wait_for(task, 30)
    assert (await statuses(conn)) == {"delivered": n}
    return e


async def _kill_backends(conn: asyncpg.Connection) -> int:
    killed: int = await conn.fetchval(
        "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity"
        " WHERE datname = current_database() AND pid <> pg_backend_pid()"
    )
    return killed


async def test_worker_rides_through_its_backends_killed_again_and_again(
    conn: asyncpg.Connection, db_url: str, receiver: Receiver
) -> None:
    receiver.routes["/r"] = delay(0.05)
    await add_endpoint(conn, receiver.url("/r"), max_in_flight=200, timeout_ms=5000)
    await _bulk(conn, N)
    e = engine(db_url, max_in_flight=200)
    task = asyncio.create_task(e.run())
    kills = 0
    for _ in range(8):
        await asyncio.sleep(0.4)
        kills += await _kill_backends(conn) > 0
    await _until(conn, N)
    assert not task.done(), "the worker stopped"
    assert kills >= 4
    got = _ids(receiver)
    assert set(got) == {f"e{i}" for i in range(N)}
    # Re-sends only of rows in flight at a kill (their outcome write was lost).
    assert sum(got.values()) - N <= kills * 200
    for _ in range(200):  # the last kill's reconnect is recorded by the next step
        if e.connectivity.connected:
            break
        await asyncio.sleep(0.05)
    e.stop()
    await asyncio.wait_for(task, 30)
    assert (await statuses(conn)) == {"delivered": N}
    assert e.stats.delivered >= N
    assert e.connectivity.outages >= 1 and e.connectivity.connected
    health = await catalog.health_summary(conn)
    assert (health.workers_live, health.workers_silent, health.outcomes_waiting) == (0, 0, 0)


async def test_database_outage_mid_run_then_sigterm(
    conn: asyncpg.Connection, db_url: str, receiver: Receiver
) -> None:
    """A restart as the worker sees it: every connection dropped, new ones
    refused for a while. One line says so, one says it is back, no traceback,
    nothing lost, and SIGTERM still exits 0."""
    receiver.routes["/r"] = delay(0.02)
    await add_endpoint(conn, receiver.url("/r"), max_in_flight=100, timeout_ms=5000)
    await _bulk(conn, N)
    proxy = await PgProxy(db_url).start()
    proc = await worker(proxy.url, "--max-in-flight", "100")
    try:
        await until_received(receiver, 300)
        outage = asyncio.create_task(proxy.outage(14.0))
        await asyncio.sleep(10.5)
        # Seen from the database during the outage: a worker gone silent,
        # its rows still in flight (the `health` command shows it). Silent
        # is 10 s after its last heartbeat, which a loaded server may have
        # run a moment after the cut: asked until 13.5 s into the outage.
        during = await catalog.health_summary(conn)
        for _ in range(30):
            if during.workers_silent == 1:
                break
            await asyncio.sleep(0.1)
            during = await catalog.health_summary(conn)
        assert during.workers_silent == 1 and during.workers_live == 0, during
        await outage
        await _until(conn, N)
        # A return is said once round trips begun after the loss have
        # answered for a second (core/connectivity.py): a fast host has
        # written every outcome by then, and an idle worker's heartbeats
        # (one a second) are what says it. Read until it does, bounded.
        assert proc.stderr is not None
        seen = b""
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(20):
                while b'"database_back"' not in seen:
                    line = await proc.stderr.readline()
                    if not line:
                        break
                    seen += line
        assert proc.returncode is None, "the worker stopped"
        proc.send_signal(signal.SIGTERM)
        _, rest = await asyncio.wait_for(proc.communicate(), 30)
        err = seen + rest
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
        await proxy.stop()
    assert proc.returncode == 0
    text = err.decode()
    assert "Traceback" not in text
    events = [orjson.loads(line)["event"] for line in text.splitlines() if line.startswith("{")]
    lost, back = events.count("database_lost"), events.count("database_back")
    assert lost >= 1 and back == lost, events
    assert len(events) < 40, events  # no line per retry
    assert set(_ids(receiver)) == {f"e{i}" for i in range(N)}
    # Outcomes that could not be written were kept and written first after
    # the outage, before any claim: the leases that ran out meanwhile did
    # not turn into re-sends.
    assert sum(_ids(receiver).values()) == N
    assert (await statuses(conn)) == {"delivered": N}


async def _raw_server(answer: object) -> tuple[asyncio.Server, int]:
    """An HTTP/1.1 server that reads one request per connection and answers
    with `answer(writer)`: for faults aiohttp's server will not make."""

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                length = 0
                for line in head.split(b"\r\n"):
                    if line.lower().startswith(b"content-length:"):
                        length = int(line.split(b":")[1])
                await reader.readexactly(length)
                if not await answer(writer):  # type: ignore[operator]
                    return
        except (asyncio.IncompleteReadError, ConnectionError):
            writer.transport.abort()

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    return server, server.sockets[0].getsockname()[1]


async def test_a_2xx_with_its_body_cut_short_is_a_delivery(
    conn: asyncpg.Connection, db_url: str
) -> None:
    async def cut(writer: asyncio.StreamWriter) -> bool:
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 1000\r\n\r\nshort")
        await writer.drain()
        writer.transport.abort()
        return False

    server, port = await _raw_server(cut)
    try:
        await add_endpoint(conn, f"http://127.0.0.1:{port}/cut", timeout_ms=2000)
        await _bulk(conn, 20)
        e = engine(db_url)
        await asyncio.wait_for(e.run(drain=True), 30)
    finally:
        server.close()
    rows = await conn.fetch("SELECT status, attempt_count, last_status_code FROM webhook_queue")
    assert {(r["status"], r["attempt_count"], r["last_status_code"]) for r in rows} == {
        ("delivered", 1, 200)
    }


async def test_scattered_resets_never_open_the_breaker(
    conn: asyncpg.Connection, db_url: str
) -> None:
    """30 % of connections reset at random. The resets come back at once,
    before the successes sent next to them: counted in completion order they
    made runs of 8-17 and opened the breaker."""
    rng = random.Random(7)

    async def flaky(writer: asyncio.StreamWriter) -> bool:
        if rng.random() < 0.3:
            writer.transport.abort()
            return False
        await asyncio.sleep(0.01)
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
        await writer.drain()
        return True

    server, port = await _raw_server(flaky)
    try:
        eid, _ = await add_endpoint(
            conn, f"http://127.0.0.1:{port}/flaky", max_in_flight=100, failure_threshold=15,
            max_attempts=20, retry_base_ms=10, retry_cap_ms=50,
        )  # fmt: skip
        await _bulk(conn, 2000)
        e = await _deliver_all(conn, db_url, 2000)
    finally:
        server.close()
    opened = await conn.fetchval(
        "SELECT count(*) FROM breaker_transitions WHERE endpoint_id = $1", eid
    )
    assert opened == 0
    assert e.stats.breaker_transitions == []


async def test_a_hanging_minority_keeps_the_window_open(
    conn: asyncpg.Connection, db_url: str, receiver: Receiver
) -> None:
    """30 % of requests never answer within the timeout; the rest at once.
    Each timeout used to halve the window until it sat at 1."""
    rng = random.Random(11)

    async def some_hang(_: Receiver, __: object, ___: bytes) -> object:
        from aiohttp import web

        if rng.random() < 0.3:
            await asyncio.sleep(2.0)
        return web.Response(status=200)

    receiver.routes["/h"] = some_hang  # type: ignore[assignment]
    eid, _ = await add_endpoint(
        conn, receiver.url("/h"), max_in_flight=100, timeout_ms=300, failure_threshold=20,
        max_attempts=30, retry_base_ms=10, retry_cap_ms=50,
        # On a loaded machine the quick answers can time out too, 20 in a
        # row opening the breaker: a short cooldown keeps that from
        # becoming the default 300 s wait; the window is what is measured.
        cooldown_s=1,
    )  # fmt: skip
    await _bulk(conn, 1500)
    e = await _deliver_all(conn, db_url, 1500)
    # Today's bar: the window sat at 1 (28 deliveries in 30 s); 10x that at least.
    gate = e.gates[eid]
    assert gate.adaptive.current >= 10, gate.adaptive


async def test_a_background_task_that_dies_stops_the_worker_loudly(
    conn: asyncpg.Connection, db_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Never half alive: a helper task that ends (here a bug in the refresh)
    takes the worker down with the reason, instead of leaving it claiming."""
    from dispatcher.db import store

    real = store.engine_endpoints
    calls = 0

    async def flaky(*args: object, **kw: object) -> object:
        nonlocal calls
        calls += 1
        if calls > 1:
            raise RuntimeError("a bug in the refresh")
        return await real(*args, **kw)  # type: ignore[arg-type]

    monkeypatch.setattr(store, "engine_endpoints", flaky)
    e = engine(db_url)
    with pytest.raises(OperationalError, match="refresher ended: RuntimeError: a bug"):
        await asyncio.wait_for(e.run(), 30)


@pytest.fixture
def private_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """A PostgreSQL of this test's own (pgserver's binaries), so it can be
    restarted without touching the server the other tests use."""
    pgserver = pytest.importorskip("pgserver")
    from pgserver._commands import pg_ctl

    data = tempfile.mkdtemp(prefix="dispatcher-restart-")
    server = pgserver.get_server(data, cleanup_mode=None)
    try:
        yield server
    finally:
        # pgserver's own cleanup tracks the postmaster it started, which a
        # restart replaced: stop whatever runs on the data folder now.
        with contextlib.suppress(Exception):
            pg_ctl(["-w", "-m", "immediate", "stop"], pgdata=server.pgdata,
                   user=server.system_user, timeout=30)  # fmt: skip
        shutil.rmtree(data, ignore_errors=True)


async def test_postgresql_restarted_mid_run(private_server: Any, receiver: Receiver) -> None:
    from pgserver._commands import pg_ctl

    url = private_server.get_uri()
    conn = await asyncpg.connect(url)
    try:
        await db.migrate(conn)
        await conn.execute("TRUNCATE endpoints CASCADE")
        receiver.routes["/r"] = delay(0.02)
        await add_endpoint(conn, receiver.url("/r"), max_in_flight=100, timeout_ms=5000)
        await _bulk(conn, N)
    finally:
        await conn.close()
    proc = await worker(url, "--max-in-flight", "100")
    try:
        await until_received(receiver, 300)
        await asyncio.to_thread(
            pg_ctl, ["-w", "-m", "fast", "restart"], pgdata=private_server.pgdata,
            user=private_server.system_user, timeout=60,
        )  # fmt: skip
        conn = await asyncpg.connect(url)
        try:
            await _until(conn, N)
            assert proc.returncode is None, "the worker stopped"
        finally:
            await conn.close()
        proc.send_signal(signal.SIGTERM)
        _, err = await asyncio.wait_for(proc.communicate(), 30)
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
    assert proc.returncode == 0, err.decode()[-2000:]
    assert "Traceback" not in err.decode()
    assert '"event":"database_lost"' in err.decode()  # the restart was felt
    assert '"event":"database_back"' in err.decode()
    got = _ids(receiver)
    assert set(got) == {f"e{i}" for i in range(N)}
    assert sum(got.values()) - N <= 100  # at most what was in flight at the restart
