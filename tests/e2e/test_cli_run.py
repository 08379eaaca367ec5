"""The worker and the admin API as a person starts and stops them (issue
25): Ctrl-C says what it waits for and a second one stops now; --json
prints one document at exit; warnings at start for endpoints the SSRF
guard will refuse and for a short admin token."""

from __future__ import annotations

import asyncio
import json
import signal
import sys

import asyncpg

from tests.helpers import WORKER_ENV, cli, cli_env
from tests.receivers import Receiver, hang


async def _line(stream: asyncio.StreamReader, prefix: str, timeout: float) -> str:
    async def find() -> str:
        while True:
            raw = await stream.readline()
            assert raw, f"the process ended before printing {prefix!r}"
            if raw.decode().startswith(prefix):
                return raw.decode()

    return await asyncio.wait_for(find(), timeout)


async def _start(db_url: str, *args: str, **env: str) -> asyncio.subprocess.Process:
    return await asyncio.create_subprocess_exec(
        sys.executable, "-m", "dispatcher", *args,
        env=cli_env(db_url, **{**WORKER_ENV, **env}),
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip


async def test_ctrl_c_says_what_it_waits_for_and_twice_stops_now(
    db_url: str, receiver: Receiver, conn: asyncpg.Connection
) -> None:
    receiver.routes["/hold"] = hang(60)
    code, _, err = await cli(db_url, "endpoint", "add", "--url", receiver.url("/hold"),
                             "--timeout-ms", "60000")  # fmt: skip
    assert code == 0, err
    code, _, err = await cli(db_url, "enqueue", "--event-type", "t", "--payload", "{}")
    assert code == 0, err
    proc = await _start(db_url, "run", "--json", DISPATCHER_GRACE_S="40")
    assert proc.stderr is not None and proc.stdout is not None
    try:
        await asyncio.wait_for(receiver.arrived.wait(), 20)
        proc.send_signal(signal.SIGINT)
        said = await _line(proc.stderr, "dispatcher: stopping", 5)
        assert "1 delivery" in said and "40 s" in said and "again" in said, said
        await asyncio.sleep(0.3)
        assert proc.returncode is None  # still waiting on the held request
        proc.send_signal(signal.SIGINT)
        now = await _line(proc.stderr, "dispatcher: stopping now", 5)
        assert "1 delivery" in now, now
        # Well within the 40 s grace period.
        assert await asyncio.wait_for(proc.wait(), 10) == 0
        doc = json.loads(await proc.stdout.read())
        assert doc["stopped_by"] == "SIGINT" and doc["released"] == 1, doc
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
    row = await conn.fetchrow("SELECT status, attempt_count FROM webhook_queue")
    assert row["status"] == "pending" and row["attempt_count"] == 0, dict(row)


async def test_run_and_serve_json_print_one_document_at_exit(
    db_url: str, receiver: Receiver
) -> None:
    code, _, err = await cli(db_url, "endpoint", "add", "--url", receiver.url("/ok"))
    assert code == 0, err
    code, _, err = await cli(db_url, "enqueue", "--event-type", "t", "--payload", "{}")
    assert code == 0, err
    code, out, err = await cli(db_url, "run", "--drain", "--json",
                               env=cli_env(db_url, **WORKER_ENV))  # fmt: skip
    assert code == 0, err
    doc = json.loads(out)
    assert doc["delivered"] == 1 and doc["stopped_by"] == "drain" and doc["http"] is None
    assert doc["worker"].startswith("w-")

    proc = await _start(db_url, "serve", "--http", "127.0.0.1:0", "--json")
    assert proc.stderr is not None and proc.stdout is not None
    try:
        listening = await _line(proc.stderr, "dispatcher: admin API on http://127.0.0.1:", 20)
        proc.send_signal(signal.SIGINT)
        assert await asyncio.wait_for(proc.wait(), 20) == 0
        doc = json.loads(await proc.stdout.read())
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
    assert doc["stopped_by"] == "SIGINT" and f"http://{doc['http']}/" in listening


async def test_worker_warns_of_endpoints_the_ssrf_guard_refuses(
    db_url: str, receiver: Receiver
) -> None:
    code, _, err = await cli(db_url, "endpoint", "add", "--url", receiver.url("/x"),
                             "--name", "local")  # fmt: skip
    assert code == 0, err
    code, _, err = await cli(db_url, "endpoint", "add", "--url", "http://localhost:9/y")
    assert code == 0, err
    code, _, err = await cli(db_url, "endpoint", "add", "--url", "https://example.com/z")
    assert code == 0, err
    env = cli_env(db_url, **WORKER_ENV)
    env.pop("DISPATCHER_ALLOW_PRIVATE_TARGETS")
    code, _, err = await cli(db_url, "run", "--drain", env=env)
    assert code == 0, err
    warnings = [line for line in err.splitlines() if line.startswith("dispatcher: warning:")]
    assert len(warnings) == 2, err
    assert "endpoint 1 (local) targets 127.0.0.1" in warnings[0]
    assert "localhost" in warnings[1]
    assert all("DISPATCHER_ALLOW_PRIVATE_TARGETS=1" in w for w in warnings)
    code, _, err = await cli(db_url, "run", "--drain", env=cli_env(db_url, **WORKER_ENV))
    assert code == 0 and "warning" not in err, err


async def test_a_short_admin_token_is_refused_beyond_loopback(db_url: str) -> None:
    env = cli_env(db_url, **WORKER_ENV, DISPATCHER_ADMIN_TOKEN="abc")
    for command in (["serve"], ["run", "--drain"]):
        code, out, err = await cli(db_url, *command, "--http", "0.0.0.0:0", env=env)
        assert code == 2 and out == "", err
        assert len(err.strip().splitlines()) == 1 and "Traceback" not in err
        assert "DISPATCHER_ALLOW_WEAK_ADMIN_TOKEN=1" in err and "32" in err
    # On loopback, a warning only.
    code, _, err = await cli(db_url, "run", "--drain", "--http", "127.0.0.1:0", env=env)
    assert code == 0, err
    assert "dispatcher: warning: DISPATCHER_ADMIN_TOKEN is 3 characters" in err
