"""A smoke run of the benchmark harness: a few hundred events, nothing lost or doubled.

Performance is never asserted here; only that the harness runs end to end
through `dispatcher bench`, and that its correctness checks hold.
"""

from __future__ import annotations

from tests.helpers import bench_smoke


async def test_bench_smoke(server_url: str) -> None:
    doc = await bench_smoke(server_url, timeout=120)
    assert doc["scenario"] == "fast" and doc["ok"] and not doc["problems"]
    d = doc["dispatcher"]
    assert d["lost"] == 0 and d["duplicates"] == 0
    assert d["delivered"] == doc["events"]
    assert d["receiver_posts"] == d["receiver_unique_ids"] == doc["events"]
    assert doc["raw"]["per_min"] > 0
    assert doc["ratio_to_raw"] > 0
    # The table `dispatcher bench fast` prints carries the figures the page quotes.
    rows = {name.strip() for name, _ in doc["table"]}
    for name in ("deliveries/min", "enqueue rate", "raw ceiling/min (aiohttp)", "lost"):
        assert name in rows
