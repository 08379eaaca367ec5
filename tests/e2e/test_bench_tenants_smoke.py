"""A smoke run of the `tenants` benchmark scenario: application a's backlog
(a few hundred events) drained alone, then again while application b's
producer commits events through dispatcher_enqueue_app; nothing lost or
doubled, every event of b delivered, the report's fields present.

Timing is never asserted (lag and rates are measured by `make bench`).
"""

from __future__ import annotations

from tests.helpers import bench_smoke


async def test_tenants_smoke(server_url: str) -> None:
    doc = await bench_smoke(server_url, "tenants", timeout=180)
    assert doc["scenario"] == "tenants" and doc["ok"] and not doc["problems"], doc["problems"]
    assert set(doc["phases"]) == {"alone", "with_b"}
    for m in doc["phases"].values():
        assert m["delivered"] == doc["events"] and m["lost"] == 0 and m["duplicates"] == 0
        assert m["exit_code"] == 0 and m["a_per_min"] > 0
    b = doc["phases"]["with_b"]["b"]
    assert b["committed"] >= 20 and b["arrived"] == b["delivered"] == b["committed"]
    assert b["duplicates"] == 0 and b["p50_ms"] is not None and b["p99_ms"] is not None
    assert doc["ratio"] > 0
    rows = {row[0] for row in doc["table"]}
    for name in (
        "a deliveries/min",
        "a with b / a alone",
        "b lag p50 / p99 / max (COMMIT -> receiver)",
    ):
        assert name in rows
