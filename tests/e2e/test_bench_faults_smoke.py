"""A smoke run of the `faults` benchmark scenario: every case runs to the end,
nothing is lost, and the breaker never opens on scattered failures.

Rates are not asserted (they are measured by `make bench`, not tested).
"""

from __future__ import annotations

from tests.helpers import bench_smoke


async def test_faults_smoke(server_url: str) -> None:
    doc = await bench_smoke(server_url, "faults")
    assert doc["scenario"] == "faults" and not doc["problems"], doc["problems"]
    cases = doc["cases"]
    assert set(cases) == {"healthy", "30 % resets", "30 % 500s", "30 % hangs", "10 % cut bodies"}
    for name, m in cases.items():
        assert m["lost"] == 0 and m["dead"] == 0 and m["delivered"] == doc["events"], name
        assert m["opened"] == 0, name
        assert m["exit_codes"] == [0], name
    # A 2xx whose body is cut short is a delivery, not a retry.
    assert cases["10 % cut bodies"]["attempts_per_event"] == 1.0
