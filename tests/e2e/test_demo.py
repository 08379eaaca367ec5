"""`dispatcher demo` tells its story end to end."""

from __future__ import annotations

import asyncio
import json
import re
import shlex
import signal
import sys
import uuid

import aiohttp
import asyncpg

from tests.helpers import cli, cli_env


async def test_demo_story(server_url: str) -> None:
    name = f"dispatcher_demo_{uuid.uuid4().hex[:8]}"
    try:
        code, out, err = await cli(server_url, "demo", "--events", "80", "--database", name,
                                   timeout=120)  # fmt: skip
    finally:
        conn = await asyncpg.connect(server_url)
        await conn.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
        await conn.close()
    assert code == 0, err[-2000:]
    assert "Traceback" not in err
    assert "dashboard: http://127.0.0.1:" in out and "?token=" not in out
    assert "demo --keep" in out
    assert "broken   closed -> open" in out and "half_open -> closed" in out
    assert "status-code" in out and "401" in out
    assert "p95_ms" in out and "delivered_last_hour" in out


async def _line_with(stream: asyncio.StreamReader, needle: str, seen: list[str]) -> str:
    while True:
        line = (await stream.readline()).decode()
        assert line, f"the demo ended before printing {needle!r}:\n" + "".join(seen)
        seen.append(line)
        if needle in line:
            return line


async def test_demo_keep_stays_up_and_its_suggestions_run_as_printed(server_url: str) -> None:
    """--keep leaves the dashboard serving until Ctrl-C; every command the
    demo suggests runs as printed (no ID / FIRST placeholders)."""
    name = f"dispatcher_demo_{uuid.uuid4().hex[:8]}"
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "dispatcher", "demo", "--events", "60", "--database", name,
        "--keep",
        env=cli_env(server_url), stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.DEVNULL,
    )  # fmt: skip
    assert proc.stdout is not None
    seen: list[str] = []
    try:
        first = await asyncio.wait_for(_line_with(proc.stdout, "dashboard: ", seen), 60)
        dashboard = re.search(r"(http://127\.0\.0\.1:\d+/)", first)
        assert dashboard and "?token=" not in first
        await asyncio.wait_for(_line_with(proc.stdout, "still up", seen), 90)
        portal = await asyncio.wait_for(_line_with(proc.stdout, "/portal/login?code=", seen), 30)
        text = "".join(seen)
        async with aiohttp.ClientSession() as s, s.get(dashboard.group(1) + "healthz") as r:
            assert r.status == 200
        # The customer's link signs in once, into the demo application's portal.
        # (unsafe: a cookie jar that keeps cookies of an IP address's site)
        async with aiohttp.ClientSession(cookie_jar=aiohttp.CookieJar(unsafe=True)) as s:
            async with s.get(portal.strip(), allow_redirects=False) as r:
                assert r.status == 303 and r.headers["Location"] == "/portal"
            async with s.get(dashboard.group(1) + "v1/endpoints") as r:
                assert r.status == 200
                assert [e["name"] for e in await r.json()] == ["acme-orders"]
        # The line is for a shell: read it as one does (the URL may be quoted).
        export = re.search(r"export DATABASE_URL=.*", text)
        assert export
        (assignment,) = shlex.split(export.group(0))[1:]
        demo_url = assignment.removeprefix("DATABASE_URL=")
        commands = re.findall(r"`([^`]+ dlq replay [^`]+)`", text)
        assert commands, text
        for command in commands:
            argv = shlex.split(command)
            assert "ID" not in argv and "FIRST" not in argv
            run = await asyncio.create_subprocess_exec(
                *argv, "--json", env={**cli_env(server_url), "DATABASE_URL": demo_url},
                stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
            )  # fmt: skip
            out, err = await asyncio.wait_for(run.communicate(), 60)
            assert run.returncode == 0, err.decode()
            assert json.loads(out)["requeued"] >= 1
        proc.send_signal(signal.SIGINT)
        assert await asyncio.wait_for(proc.wait(), 30) == 0
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
        conn = await asyncpg.connect(server_url)
        await conn.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
        await conn.close()


async def test_a_second_demo_waits_its_turn_and_metrics_count_the_demo(server_url: str) -> None:
    """Issue 25: a second demo on the same database is refused with one
    line (it used to drop the first one's database under it), and the
    demo's /metrics counts the demo's own deliveries."""
    name = f"dispatcher_demo_{uuid.uuid4().hex[:8]}"
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "dispatcher", "demo", "--events", "40", "--database", name,
        "--keep",
        env=cli_env(server_url), stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.DEVNULL,
    )  # fmt: skip
    assert proc.stdout is not None
    seen: list[str] = []
    try:
        first = await asyncio.wait_for(_line_with(proc.stdout, "dashboard: ", seen), 60)
        code, _, err = await cli(server_url, "demo", "--events", "5", "--database", name,
                                   timeout=60)  # fmt: skip
        assert code == 1 and "Traceback" not in err, err
        assert len(err.strip().splitlines()) == 1, err
        assert "another dispatcher demo" in err and "--database" in err
        await asyncio.wait_for(_line_with(proc.stdout, "still up", seen), 90)
        dashboard = re.search(r"(http://127\.0\.0\.1:\d+/)", first)
        token = re.search(r"admin token (\S+)", first)
        assert dashboard and token
        headers = {"Authorization": f"Bearer {token.group(1)}"}
        async with aiohttp.ClientSession(headers=headers) as s:
            async with s.get(dashboard.group(1) + "metrics") as r:
                assert r.status == 200
                text = await r.text()
        delivered = re.search(r'^dispatcher_deliveries_total\{outcome="delivered"\} (\S+)$',
                              text, flags=re.MULTILINE)  # fmt: skip
        assert delivered and float(delivered.group(1)) >= 40, text[:2000]
        proc.send_signal(signal.SIGINT)
        assert await asyncio.wait_for(proc.wait(), 30) == 0
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
        conn = await asyncpg.connect(server_url)
        await conn.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
        await conn.close()
