"""Producers as users run them: asyncpg connections, each committing one
event per transaction through `dispatcher_enqueue`; the plain-INSERT
reference (a copy of the queue's table, webhook_live, with the same
indexes, no trigger, no function); paced load for the soak; and the idle-wake samples.

The producer side of the bench database (database.py reads results back):
it writes rows the way an application would, and times the commits.
"""

from __future__ import annotations

import asyncio
import os
import random
import time
from collections.abc import Callable, Sequence
from typing import Any

import asyncpg

from .output import pct

ENQUEUE_SQL = "SELECT dispatcher_enqueue($1, $2::json, $3)"
ENQUEUE_APP_SQL = "SELECT dispatcher_enqueue_app($1, $2, $3::json, $4)"
PLAIN_TABLE = "bench_plain_queue"
PLAIN_SQL = (
    f"INSERT INTO {PLAIN_TABLE} (endpoint_id, event_id, event_type, payload, max_attempts)"
    " VALUES ($4, $3, $1, $2::json, 5)"
)
EVENT_TYPE = "bench.producers"

Args = Callable[[int, int], tuple[Any, ...]]  # (producer, k) -> statement arguments


async def connect_producers(url: str, n: int) -> list[asyncpg.Connection]:
    """n connections with the server's defaults (synchronous commit on, as
    an application's own transactions have)."""
    return list(await asyncio.gather(*(asyncpg.connect(url, timeout=10) for _ in range(n))))


async def close_all(conns: Sequence[asyncpg.Connection]) -> None:
    await asyncio.gather(*(c.close(timeout=5) for c in conns), return_exceptions=True)


async def create_plain_copy(conn: asyncpg.Connection) -> None:
    """webhook_live's columns, defaults and indexes; no trigger, no foreign key."""
    await conn.execute(f"DROP TABLE IF EXISTS {PLAIN_TABLE}")
    await conn.execute(f"CREATE TABLE {PLAIN_TABLE} (LIKE webhook_live INCLUDING ALL)")


async def burst(
    conns: Sequence[asyncpg.Connection], total: int, sql: str, args: Args
) -> tuple[int, float]:
    """Every producer commits its share of `total` one transaction at a time,
    all at once; returns (transactions, seconds)."""
    n = len(conns)
    shares = [total // n + (1 if i < total % n else 0) for i in range(n)]

    async def one(i: int) -> None:
        c = conns[i]
        for k in range(shares[i]):
            async with c.transaction():
                await c.fetchval(sql, *args(i, k))

    t0 = time.perf_counter()
    await asyncio.gather(*(one(i) for i in range(n)))
    return total, time.perf_counter() - t0


def event_args(prefix: str, endpoint_id: int, payload: str) -> Args:
    """Arguments for ENQUEUE_SQL and PLAIN_SQL alike: unique event ids."""
    return lambda i, k: (EVENT_TYPE, payload, f"{prefix}-{i}-{k}", endpoint_id)


def enqueue_args(prefix: str, payload: str) -> Args:
    return lambda i, k: (EVENT_TYPE, payload, f"{prefix}-{i}-{k}")


async def paced(
    conns: Sequence[asyncpg.Connection],
    rate_per_s: float,
    seconds: float,
    args: Args,
    stop: asyncio.Event | None = None,
    done: list[int] | None = None,
    *,
    sql: str = ENQUEUE_SQL,
    commits: dict[tuple[int, int], float] | None = None,
) -> int:
    """A steady offered load: each producer commits on its own schedule
    (rate / n per second), catching up if it falls behind, never bursting
    ahead. Returns the transactions committed; `done` (one count per
    producer) follows them as they commit, `commits` the time.time() each
    COMMIT returned, by (producer, k)."""
    n = len(conns)
    gap = n / rate_per_s
    done = [0] * n if done is None else done
    t_end = time.monotonic() + seconds

    async def one(i: int) -> None:
        c = conns[i]
        due = time.monotonic() + gap * i / n
        k = 0
        while (stop is None or not stop.is_set()) and max(due, time.monotonic()) < t_end:
            delay = due - time.monotonic()
            if delay > 0:
                await asyncio.sleep(delay)
            async with c.transaction():
                await c.fetchval(sql, *args(i, k))
            if commits is not None:
                commits[i, k] = time.time()
            k += 1
            done[i] = k
            due += gap

    await asyncio.gather(*(one(i) for i in range(n)))
    return sum(done)


async def wake_samples(
    conn: asyncpg.Connection,
    arrivals: Callable[[], Any],
    payload: str,
    samples: int,
    *,
    gap_s: tuple[float, float] = (0.05, 0.2),
    settle_s: float = 3.0,
) -> dict[str, Any]:
    """Single events into an idle worker, one committed transaction each;
    latency = first byte at the receiver minus the return of COMMIT."""
    run_id = os.urandom(4).hex()
    committed: dict[str, float] = {}
    rng = random.Random(7)
    for i in range(samples):
        eid = f"wake-{run_id}-{i}"
        async with conn.transaction():
            await conn.fetchval(ENQUEUE_SQL, EVENT_TYPE, payload, eid)
        committed[eid] = time.time()
        await asyncio.sleep(rng.uniform(*gap_s))
    end = time.monotonic() + settle_s
    seen: dict[str, float] = {}
    while time.monotonic() < end:
        seen = await arrivals()
        if all(e in seen for e in committed):
            break
        await asyncio.sleep(0.1)
    lat = [(seen[e] - t) * 1000 for e, t in committed.items() if e in seen]
    return {
        "samples": samples,
        "arrived": len(lat),
        "missing": samples - len(lat),
        "p50_ms": pct(lat, 0.5),
        "p90_ms": pct(lat, 0.9),
        "p99_ms": pct(lat, 0.99),
        "max_ms": max(lat) if lat else None,
    }
