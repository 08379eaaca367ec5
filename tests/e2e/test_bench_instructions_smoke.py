"""A smoke run of the instructions scenario: both callgrind passes of the
worker drain every event, both of the bare client post every request, and
each count per delivery or request comes from its passes' difference.
What the counts are is never asserted here (they are measurements)."""

from __future__ import annotations

import asyncio
import json
import shutil
import sys

import pytest

from tests.conftest import REPO
from tests.helpers import cli_env

pytestmark = [
    pytest.mark.skipif(
        shutil.which("valgrind") is None, reason="valgrind is not installed (.ci/run installs it)"
    ),
    # Four processes under callgrind hold a core for minutes: beside the
    # parallel lane they took 405 s and made a lease-timed FIFO test late.
    pytest.mark.serial,
]


async def test_bench_instructions_smoke(server_url: str) -> None:
    env = cli_env(server_url)
    env.pop("DISPATCHER_ALLOW_PRIVATE_TARGETS")  # the harness sets it for its own processes
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "dispatcher", "bench", "instructions", "--smoke", "--json",
        "--events", "100",
        env=env, cwd=REPO, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    out, err = await asyncio.wait_for(proc.communicate(), 600)
    assert proc.returncode == 0, err.decode()[-3000:]
    doc = json.loads(out)
    assert doc["scenario"] == "instructions" and doc["ok"] and not doc["problems"]
    counted = doc["instructions"]
    for kind, per in (("passes", "per_delivery"), ("bare_passes", "bare_per_request")):
        passes = {int(n): c for n, c in counted[kind].items()}
        assert sorted(passes) == [20, 100], kind
        assert counted[per] == round((passes[100] - passes[20]) / 80), kind
