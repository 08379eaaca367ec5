"""A smoke run of the `slowmix` benchmark scenario (the slow-receiver
scenarios share one body): answers after 50 to 1,000 ms, and the figures
issue 27 asks of every latency scenario are in the report.

Rates are not asserted (they are measured by `make bench`, not tested).
"""

from __future__ import annotations

from tests.helpers import bench_smoke


async def test_slowmix_smoke(server_url: str) -> None:
    doc = await bench_smoke(server_url, "slowmix")
    assert doc["scenario"] == "slowmix" and not doc["problems"], doc["problems"]
    m = doc["dispatcher"]
    assert m["lost"] == 0 and m["exit_codes"] == [0]
    # The receiver drew its delays from the range: the slowest answer took
    # more than the fastest could, and none less than 50 ms.
    assert m["http_p99_ms"] > m["http_p50_ms"] >= 50
    held = m["in_flight"]
    assert held["allowed"] == doc["allowed_in_flight"] > 0
    assert 0 < held["peak"] <= held["allowed"]
    rows = {name.strip() for name, _ in doc["table"]}
    for name in (
        "in flight at receiver: median while backlog",
        "first request -> 50 / 90 % of allowed",
        "dispatcher CPU s / wall s",
        "ratio dispatcher/raw",
    ):
        assert name in rows
