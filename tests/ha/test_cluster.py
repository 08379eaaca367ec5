"""The cluster rig, short: two PostgreSQL nodes under Patroni (synchronous
replication), etcd, two worker hosts and a receiver, each in its own network
namespace; the leader killed, then one worker host cut off from both
databases for 20 s, while a producer enqueues 200 events a second.

Asserts what issue 26 and the SPEC promise, with generous time bounds:
nothing acknowledged is lost, no more is re-sent than was in flight, and
deliveries come back (the SPEC's figure after a partition heals is 10 s;
30 s is asserted, the measured figure is in docs/benchmarks/cluster.md).
Skips, saying why, where namespaces cannot be made or Patroni/etcd are
missing. Serial lane: it builds hosts and a database cluster of its own.
"""

from __future__ import annotations

import asyncio

import pytest

from benchmarks.rig.faults import run_mode
from benchmarks.rig.rig import unavailable

pytestmark = pytest.mark.serial

BACK_S = 30.0  # generous: the SPEC says 10 s after a partition heals


async def test_cluster_rig_kill_and_partition() -> None:
    why = unavailable()
    if why:
        pytest.skip(why)
    async with asyncio.timeout(170):
        results = await run_mode(
            True, ("kill_leader", "partition_worker"), rate=200, latency_ms=200.0, observe_s=25.0
        )
    kill, part = results
    for m in results:
        in_flight = max(m["in_flight_rows"], m["in_flight_http"])
        assert m["lost"] == 0, m
        assert m["duplicates"] <= in_flight, m
        assert m["enqueued"] > 1000, m  # the stream really flowed
        assert m["steady_s"] is not None, m
    # The leader's host died: another node leads and deliveries resume.
    assert kill["new_leader"] not in (None, kill["leader"]), kill
    assert kill["back_s"] <= BACK_S, kill
    # w1 really was cut off, and delivers again soon after the heal.
    assert part["worker_quiet_s"] >= 10, part
    assert part["worker_back_after_heal_s"] is not None, part
    assert part["worker_back_after_heal_s"] <= BACK_S, part
