"""A smoke run of the benchmark harness: a few hundred events, nothing lost or doubled.

Performance is never asserted here; only that the harness runs end to end
through `dispatcher bench`, and that its correctness checks hold.
"""

from __future__ import annotations

import asyncio
import json
import sys

from tests.conftest import REPO
from tests.helpers import cli_env


async def test_bench_smoke(server_url: str) -> None:
    env = cli_env(server_url)
    env.pop("DISPATCHER_ALLOW_PRIVATE_TARGETS")  # the harness sets it for its own processes
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "dispatcher", "bench", "--smoke", "--json",
        env=env, cwd=REPO, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    out, err = await asyncio.wait_for(proc.communicate(), 120)
    assert proc.returncode == 0, err.decode()[-3000:]
    doc = json.loads(out)
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
