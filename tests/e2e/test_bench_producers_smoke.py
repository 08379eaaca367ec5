"""A smoke run of the producers scenario: a few hundred events committed one
per transaction, the plain-INSERT reference beside them, idle wake-ups;
nothing lost or doubled. Performance is never asserted here."""

from __future__ import annotations

import asyncio
import json
import sys

from tests.conftest import REPO
from tests.helpers import cli_env


async def test_bench_producers_smoke(server_url: str) -> None:
    env = cli_env(server_url)
    env.pop("DISPATCHER_ALLOW_PRIVATE_TARGETS")  # the harness sets it for its own processes
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "dispatcher", "bench", "producers", "--smoke", "--json",
        env=env, cwd=REPO, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    out, err = await asyncio.wait_for(proc.communicate(), 180)
    assert proc.returncode == 0, err.decode()[-3000:]
    doc = json.loads(out)
    assert doc["scenario"] == "producers" and doc["ok"] and not doc["problems"]
    r = doc["producers_result"]
    assert r["lost"] == 0 and r["duplicates"] == 0
    assert r["enqueue_tps"] > 0 and r["plain_tps"] > 0 and r["ratio"] > 0
    assert r["wake"]["arrived"] == r["wake"]["samples"] > 0
    assert r["wake"]["p99_ms"] is not None
