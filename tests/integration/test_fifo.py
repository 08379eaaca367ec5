"""FIFO endpoints: one delivery at a time per key, in enqueue order, across
workers, through retries, pauses and lease reclaims; keys in parallel."""

from __future__ import annotations

import asyncio
import json
import random
from collections import defaultdict
from dataclasses import replace

import asyncpg
from aiohttp import web

from dispatcher import enqueue
from dispatcher.worker.engine import Engine
from tests.helpers import FAST, add_endpoint, statuses
from tests.receivers import Receiver


class Lanes:
    """A receiver's view: what is in flight per key, and the order of 2xx."""

    def __init__(self, fail: dict[tuple[str, int], list[int]]) -> None:
        self.fail = fail  # (key, seq) -> status codes to answer first, in turn
        self.in_flight: dict[str, int] = defaultdict(int)
        self.overlaps: list[str] = []
        self.delivered: dict[str, list[int]] = defaultdict(list)
        self.max_parallel_keys = 0

    async def __call__(self, _: Receiver, __: web.Request, body: bytes) -> web.StreamResponse:
        doc = json.loads(body)
        key, seq = doc["user"], doc["seq"]
        self.in_flight[key] += 1
        if self.in_flight[key] > 1:
            self.overlaps.append(key)
        self.max_parallel_keys = max(self.max_parallel_keys,
                                     sum(1 for n in self.in_flight.values() if n))  # fmt: skip
        try:
            await asyncio.sleep(random.uniform(0.002, 0.02))
            codes = self.fail.get((key, seq))
            if codes:
                code = codes.pop(0)
                headers = {"Retry-After": "1"} if code == 429 else None
                return web.Response(status=code, headers=headers)
            self.delivered[key].append(seq)
            return web.Response(status=200)
        finally:
            self.in_flight[key] -= 1


async def _events(conn: asyncpg.Connection, keys: int, per_key: int) -> None:
    order = [(k, s) for s in range(per_key) for k in range(keys)]
    for k, s in order:
        payload = json.dumps({"user": f"k{k}", "seq": s})
        await enqueue(conn, "t", payload, f"evt_{k}_{s}")


async def test_fifo_across_two_workers_through_retries_and_pauses(
    conn: asyncpg.Connection, db_url: str, receiver: Receiver
) -> None:
    lanes = Lanes({("k0", 0): [503, 500], ("k1", 3): [429], ("k2", 5): [500, 500, 500]})
    receiver.routes["/fifo"] = lanes
    await add_endpoint(conn, receiver.url("/fifo"), ordering="fifo", ordering_key="user",
                       retry_base_ms=50, retry_cap_ms=100, max_attempts=10,
                       failure_threshold=1000)  # fmt: skip
    await _events(conn, keys=6, per_key=30)
    settings = replace(FAST, poll_interval_s=0.05)
    claimed = [0, 0]
    # A drain ends when what is left waits (a retry, a Retry-After pause, a
    # lane behind the other worker's head): drain again, a bounded number of times.
    for _ in range(60):
        workers = [Engine(settings, db_url), Engine(settings, db_url)]
        await asyncio.wait_for(asyncio.gather(*(w.run(drain=True) for w in workers)), 90)
        claimed = [c + w.stats.claimed for c, w in zip(claimed, workers, strict=True)]
        if (await statuses(conn)) == {"delivered": 180}:
            break
        await asyncio.sleep(0.2)
    assert lanes.overlaps == []
    assert {k: v for k, v in lanes.delivered.items()} == {f"k{k}": list(range(30))
                                                         for k in range(6)}  # fmt: skip
    assert (await statuses(conn)) == {"delivered": 180}
    assert lanes.max_parallel_keys > 1  # keys flow in parallel
    # Every row was claimed (retries again). Not asserted: that both workers
    # took part. Since joining workers wait for their share (schema 017),
    # of two drains started together one often takes everything; the lanes
    # above still never overlapped. Left open in issue 26's note.
    assert sum(claimed) >= 180


async def test_a_reclaimed_head_goes_before_the_rest_of_its_lane(
    conn: asyncpg.Connection, db_url: str, receiver: Receiver
) -> None:
    lanes = Lanes({})
    receiver.routes["/fifo"] = lanes
    eid, _ = await add_endpoint(conn, receiver.url("/fifo"), ordering="fifo",
                                ordering_key="user")  # fmt: skip
    await _events(conn, keys=2, per_key=5)
    # A worker died holding k0's head: in flight, its lease not yet over.
    await conn.execute(
        "UPDATE webhook_queue SET status = 'in_flight', locked_by = 'gone',"
        " next_attempt_at = now() + interval '1.5 seconds' WHERE event_id = 'evt_0_0'"
    )
    await asyncio.wait_for(Engine(FAST, db_url).run(drain=True), 60)
    # k1 went on; k0 waits behind its head, held by the dead worker's lease.
    assert lanes.delivered["k1"] == list(range(5))
    assert lanes.delivered["k0"] == []
    await asyncio.sleep(1.6)
    await asyncio.wait_for(Engine(FAST, db_url).run(drain=True), 60)
    assert lanes.delivered["k0"] == list(range(5))
    assert (await statuses(conn)) == {"delivered": 10}
    lanes_of = await conn.fetch("SELECT DISTINCT order_key FROM webhook_queue WHERE endpoint_id"
                                " = $1 ORDER BY 1", eid)  # fmt: skip
    assert [r["order_key"] for r in lanes_of] == ["k0", "k1"]


async def test_a_dead_head_lets_its_lane_go_on_and_no_key_means_one_lane(
    conn: asyncpg.Connection, db_url: str, receiver: Receiver
) -> None:
    lanes = Lanes({("k0", 0): [400]})  # permanent: dead at once
    receiver.routes["/fifo"] = lanes
    await add_endpoint(conn, receiver.url("/fifo"), ordering="fifo", ordering_key="user")
    single = Lanes({})
    receiver.routes["/one"] = single
    await add_endpoint(conn, receiver.url("/one"), ordering="fifo")  # one lane for all
    await _events(conn, keys=3, per_key=4)
    await asyncio.wait_for(Engine(FAST, db_url).run(drain=True), 60)
    assert lanes.delivered["k0"] == [1, 2, 3]
    assert single.overlaps == [] and single.max_parallel_keys == 1
    # One lane: every event, in enqueue order (keys interleaved as enqueued).
    arrivals = [r for r in receiver.received if r.path == "/one"]
    assert [json.loads(r.body)["seq"] for r in arrivals] == [s for s in range(4) for _ in range(3)]
