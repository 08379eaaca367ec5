"""Smoke runs of the shaping scenarios (a few hundred events): the harness
runs them end to end and their correctness checks hold. No timing asserted."""

from __future__ import annotations

from tests.helpers import bench_smoke


async def test_fifo_smoke(server_url: str) -> None:
    doc = await bench_smoke(server_url, "fifo", timeout=180)
    assert doc["ok"] and not doc["problems"], doc["problems"]
    for phase in doc["phases"].values():
        assert phase["lost"] == 0 and phase["duplicates"] == 0
        assert phase["delivered"] == doc["events"]
    assert doc["ratio"] > 0


async def test_filters_smoke(server_url: str) -> None:
    doc = await bench_smoke(server_url, "filters", timeout=180)
    assert doc["ok"] and not doc["problems"], doc["problems"]
    result = doc["filters_result"]
    # 100 rows per event without filters; 95 with 10 filtered, half matching.
    assert result["rows"]["none"] == doc["events"] * 100
    assert result["rows"]["filtered"] == doc["events"] * 95


async def test_https_smoke(server_url: str) -> None:
    doc = await bench_smoke(server_url, "https", timeout=180)
    assert doc["ok"] and not doc["problems"], doc["problems"]
    for phase in doc["phases"].values():
        assert phase["lost"] == 0 and phase["duplicates"] == 0
    assert doc["ratio"] > 0


async def test_held_smoke(server_url: str) -> None:
    doc = await bench_smoke(server_url, "held", timeout=180)
    assert doc["ok"] and not doc["problems"], doc["problems"]
    result = doc["held_result"]
    assert result["lost"] == 0
    assert result["delivered"] == {"none": doc["events"], "held": doc["events"]}
    assert result["ratio"] > 0


async def test_tracing_smoke(server_url: str) -> None:
    doc = await bench_smoke(server_url, "tracing", timeout=180)
    assert doc["ok"] and not doc["problems"], doc["problems"]
    for phase in doc["phases"].values():
        assert phase["lost"] == 0 and phase["duplicates"] == 0
    # Every attempt of the traced round reached the OTLP sink as a span.
    assert doc["spans_exported"] == doc["events"] * doc["rounds"]
