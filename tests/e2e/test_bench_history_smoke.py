"""A smoke run of the history scenario: a few thousand rows of each kind
filled beside an empty database, every measurement taken on both, the
oldest day dropped, both drains exact. Performance is never asserted here."""

from __future__ import annotations

import asyncio
import json
import sys

from tests.conftest import REPO
from tests.helpers import cli_env


async def test_bench_history_smoke(server_url: str) -> None:
    env = cli_env(server_url)
    env.pop("DISPATCHER_ALLOW_PRIVATE_TARGETS")  # the harness sets it for its own processes
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "dispatcher", "bench", "history", "--smoke", "--json",
        "--rows", "3000", "--events", "300",
        env=env, cwd=REPO, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    out, err = await asyncio.wait_for(proc.communicate(), 240)
    assert proc.returncode == 0, err.decode()[-3000:]
    doc = json.loads(out)
    assert doc["scenario"] == "history" and doc["ok"] and not doc["problems"]
    empty, full = doc["sides"]["empty"], doc["sides"]["history"]
    for side in (empty, full):
        assert side["drain"]["delivered"] == 300 and side["drain"]["lost"] == 0
        assert side["enqueue_tps"] > 0 and side["idle_pg_cpu_s"] >= 0
        assert set(side["reads_ms"]) == set(empty["reads_ms"]) and side["reads_ms"]
    assert full["fill_s"]["history"] >= 0 and "history" not in empty["fill_s"]
    drops = full["retention"]["drops"]
    assert drops["webhook_history_delivered"]["dropped"] >= 1  # the oldest day
    for parent in ("webhook_history_delivered", "endpoint_latency", "event_payloads"):
        assert drops[parent]["rows"] > 0 and drops[parent]["rows_per_s"] > 0, parent
    assert full["retention"]["loop_during"]["n"] > 0
