"""A smoke run of the soak, 20 seconds long: it writes its JSON, CSV and
chart, and loses or doubles nothing. Trends and rates are not asserted."""

from __future__ import annotations

import asyncio
import csv
import json
import os
import sys
from pathlib import Path

from tests.conftest import REPO
from tests.helpers import cli_env


async def test_soak_smoke(server_url: str, tmp_path: Path) -> None:
    env = cli_env(server_url)
    env.pop("DISPATCHER_ALLOW_PRIVATE_TARGETS")  # the harness sets it for its own processes
    out = tmp_path / "soak"
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "benchmarks.soak", "--minutes", "0.34", "--sample-s", "5",
        "--capacity-s", "2", "--producers", "4", "--retention-s", "30",
        "--out-dir", str(out), "--db-name", f"dispatcher_soak_smoke_{os.getpid()}",
        env=env, cwd=REPO, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    stdout, err = await asyncio.wait_for(proc.communicate(), 300)
    assert proc.returncode == 0, err.decode()[-3000:]
    summary = json.loads(stdout)
    assert summary["ok"] and summary["undelivered"] == 0 and summary["duplicates"] == 0
    doc = json.loads((out / "soak.json").read_text())
    assert doc["offered_per_s"] > 0 and doc["capacity"]["events"] > 0
    assert len(doc["intervals"]) >= 3
    with (out / "soak.csv").open() as f:
        rows = list(csv.DictReader(f))
    assert len(rows) == len(doc["intervals"])
    assert {"lag_p50_ms", "lag_p99_ms", "rss_mb", "queue_total_mb", "queue_dead"} <= set(rows[0])
    png = (out / "soak.png").read_bytes()
    assert png.startswith(b"\x89PNG")
