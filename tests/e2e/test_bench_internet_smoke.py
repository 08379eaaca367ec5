"""A smoke run of the `internet` benchmark scenario: lognormal delays, a mix
of timeouts, 5xx and 429, a third of the endpoints over https with a CA made
for the run (trusted through DISPATCHER_CA_FILE); nothing is lost and every
event reaches a receiver.

Rates are not asserted (they are measured by `make bench`, not tested).
"""

from __future__ import annotations

from tests.helpers import bench_smoke


async def test_internet_smoke(server_url: str) -> None:
    doc = await bench_smoke(server_url, "internet")
    assert doc["scenario"] == "internet" and doc["ok"] and not doc["problems"], doc["problems"]
    m = doc["dispatcher"]
    assert m["lost"] == 0 and m["exit_codes"] == [0]
    assert m["delivered"] + m["dead"] == doc["events"]
    assert m["receiver_unique_ids"] == doc["events"]
    # Every attempt reached a receiver, and the receivers answered each one
    # some way (ok, 5xx, 429, or no answer at all).
    assert m["receiver_posts"] == sum(m["receiver_answers"].values())
    assert m["receiver_answers"].get("ok", 0) >= m["delivered"]
    rows = {name.strip() for name, _ in doc["table"]}
    for name in ("deliveries/min", "lag p50 / p99 (created->delivered)", "dispatcher peak RSS"):
        assert name in rows
