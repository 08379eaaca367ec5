"""A smoke run of the benchmark harness: a few hundred events, nothing lost or doubled.

Performance is never asserted here; only that the harness runs end to end and
its correctness checks hold.
"""

from __future__ import annotations

import json

from tests.conftest import REPO
from tests.helpers import cli_env


async def test_bench_smoke(server_url: str) -> None:
    env = cli_env(server_url)
    env.pop("DISPATCHER_ALLOW_PRIVATE_TARGETS")  # the harness sets it for its own processes
    import asyncio
    import sys

    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "dispatcher", "bench", "--smoke", "--json",
        env=env, cwd=REPO, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    out, err = await asyncio.wait_for(proc.communicate(), 120)
    assert proc.returncode == 0, err.decode()[-3000:]
    doc = json.loads(out)
    d = doc["dispatcher"]
    assert d["lost"] == 0 and d["duplicates"] == 0
    assert d["delivered"] == doc["events"]
    assert doc["raw"]["per_min"] > 0
