"""A smoke run of the `jobqueue` benchmark scenario: a few hundred events
through a procrastinate worker and through the dispatcher, to the same
receiver; nothing lost or doubled by either. No timing asserted."""

from __future__ import annotations

from tests.helpers import bench_smoke


async def test_jobqueue_smoke(server_url: str) -> None:
    doc = await bench_smoke(server_url, "jobqueue", timeout=180)
    assert doc["ok"] and not doc["problems"], doc["problems"]
    for side in ("procrastinate", "dispatcher"):
        m = doc[side]
        assert m["lost"] == 0 and m["duplicates"] == 0
        assert m["delivered"] == m["receiver_posts"] == doc["events"]
    assert doc["procrastinate"]["jobs_succeeded"] == doc["events"]
    assert doc["ratio"] > 0
