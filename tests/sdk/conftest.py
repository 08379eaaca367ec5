"""The Svix-compatible API (`/api/v1/`) as the official `svix` SDKs see it:
a live `dispatcher run --http` (the worker and the admin API in one
process, as a container runs it) on a database of its own, delivering to
real receivers on 127.0.0.1."""

from __future__ import annotations

import asyncio
import sys
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import aiohttp
import pytest

from tests.helpers import WORKER_ENV, cli_env, free_port, ready

TOKEN = "sdk-admin-token-0123456789abcdef"


@dataclass
class Server:
    url: str  # the SDKs' server_url, e.g. http://127.0.0.1:PORT
    token: str  # the admin token
    log: Path  # the process's stderr

    def tail(self, n: int = 4000) -> str:
        return self.log.read_text(errors="replace")[-n:]


@pytest.fixture
async def server(db_url: str, tmp_path: Path) -> AsyncIterator[Server]:
    port = free_port()
    log = tmp_path / "dispatcher.log"
    with open(log, "wb") as err:
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "dispatcher", "run", "--http", f"127.0.0.1:{port}",
            env=cli_env(db_url, **WORKER_ENV, DISPATCHER_ADMIN_TOKEN=TOKEN),
            stdout=asyncio.subprocess.DEVNULL, stderr=err,
        )  # fmt: skip
    base = f"http://127.0.0.1:{port}"
    try:
        async with aiohttp.ClientSession() as s:
            for _ in range(400):
                if await ready(s, base):
                    break
                assert proc.returncode is None, log.read_text(errors="replace")[-3000:]
                await asyncio.sleep(0.05)
            else:
                pytest.fail("dispatcher run --http never became ready")
        yield Server(base, TOKEN, log)
    finally:
        if proc.returncode is None:
            proc.terminate()
        await asyncio.wait_for(proc.wait(), 20)
        # Captured, so shown only when the test fails: what the server said
        # (a CI run once got a body that was not JSON from the first call).
        print(f"--- dispatcher log ({port}) ---\n" + log.read_text(errors="replace")[-4000:])


async def admin(server: Server, method: str, path: str, body: object = None) -> dict:
    """The native admin API (`/v1/…`) with the admin token."""
    headers = {"Authorization": f"Bearer {server.token}"}
    async with aiohttp.ClientSession() as s:
        async with s.request(method, server.url + path, json=body, headers=headers) as r:
            text = await r.text()
            assert r.status < 300, (path, r.status, text)
            doc: dict = await r.json(content_type=None)
            return doc
