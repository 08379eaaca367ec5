"""schemathesis against the live admin API: whatever it sends, never a 500.

In four shards by path (every operation in exactly one), so that the
suite's workers fuzz them side by side rather than one after another (the
longest shard sets the lane's end: "the rest" alone took a minute).
"""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

import aiohttp
import pytest

from tests.helpers import cli_env, free_port

TOKEN = "fuzz-token"
_ENDPOINTS = "^/v1/endpoints"
_TENANCY = "^/v1/(applications|event-types|ops-webhooks)"
_SVIX_APPS = "^/api/v1/app"
SHARDS = {
    "endpoints": ["--include-path-regex", _ENDPOINTS],
    "tenancy": ["--include-path-regex", _TENANCY],
    "svix apps": ["--include-path-regex", _SVIX_APPS],
    "the rest": ["--exclude-path-regex", f"({_ENDPOINTS})|({_TENANCY})|({_SVIX_APPS})"],
}


@pytest.mark.parametrize("shard", SHARDS)
async def test_schemathesis_finds_no_server_errors(db_url: str, tmp_path: Path, shard: str) -> None:
    port = free_port()
    env = cli_env(db_url, DISPATCHER_ADMIN_TOKEN=TOKEN)
    server = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "dispatcher", "serve", "--http", f"127.0.0.1:{port}",
        env=env, stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    try:
        async with aiohttp.ClientSession() as s:
            for _ in range(100):
                try:
                    async with s.get(f"http://127.0.0.1:{port}/readyz") as r:
                        if r.status == 200:
                            break
                except aiohttp.ClientError:
                    pass
                await asyncio.sleep(0.1)
        st = Path(sys.executable).parent / "st"
        proc = await asyncio.create_subprocess_exec(
            str(st), "run", f"http://127.0.0.1:{port}/v1/openapi.json",
            "-H", f"Authorization: Bearer {TOKEN}",
            "--checks", "not_a_server_error",
            "--max-examples", "25", "--seed", "1",
            # One worker: schemathesis workers are threads, and concurrent
            # ast.parse trips a CPython 3.11 bug ("AST constructor recursion
            # depth mismatch", fixed in 3.11.8) that crashes the run.
            "--workers", "1",
            "--phases", "examples,coverage,fuzzing", "--max-failures", "5",
            *SHARDS[shard],
            cwd=tmp_path, env=env,
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
        )  # fmt: skip
        out, _ = await asyncio.wait_for(proc.communicate(), 240)
        assert proc.returncode == 0, out.decode()[-4000:]
    finally:
        server.terminate()
        await asyncio.wait_for(server.wait(), 15)
    assert server.returncode == 0
