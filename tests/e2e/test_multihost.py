"""A multi-host DATABASE_URL: every command that touches the database finds
the writable host, whatever comes before it.

The URL's hosts, in order: a closed port (refused), a standby (answers,
but reports `in_hot_standby=on` and `default_transaction_read_only=on`, as
PostgreSQL 14 and later do on a hot standby), then the real server; with
`target_session_attrs=read-write` the first two are passed over. The
standby is a few lines of the wire protocol below, not a second server:
asyncpg, like libpq 14+, decides from the parameters the server reports at
start-up (a server that reports neither is asked `pg_is_in_recovery()`),
so those parameters are the whole of what it sees of a standby (a real
standby, and a primary read-only by default, are in
tests/integration/test_standby.py).

A silent first host (accepts, never answers: a node powered off behind a
load balancer, a partition) costs one `connect_timeout`, then the next
host is tried.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import signal
import struct
import sys
from collections.abc import AsyncIterator, Awaitable, Callable
from urllib.parse import urlsplit, urlunsplit

import aiohttp
import asyncpg
import pytest

from tests.helpers import WORKER_ENV, add_endpoint, cli, cli_env, statuses
from tests.pgproxy import PgProxy
from tests.receivers import Receiver

StreamHandler = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]


def _message(kind: bytes, body: bytes) -> bytes:
    return kind + struct.pack("!i", len(body) + 4) + body


async def _standby(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """Start-up as a hot standby answers it: no TLS, trust, then the
    reported parameters that say "in recovery, read-only"."""
    with contextlib.suppress(ConnectionError, asyncio.IncompleteReadError):
        while True:
            size = struct.unpack("!i", await reader.readexactly(4))[0]
            body = await reader.readexactly(size - 4)
            if struct.unpack("!i", body[:4])[0] == 80877103:  # SSLRequest
                writer.write(b"N")
                continue
            break
        params = {
            "server_version": "15.0",
            "server_encoding": "UTF8",
            "client_encoding": "UTF8",
            "DateStyle": "ISO, MDY",
            "integer_datetimes": "on",
            "in_hot_standby": "on",
            "default_transaction_read_only": "on",
        }
        out = _message(b"R", struct.pack("!i", 0))
        for k, v in params.items():
            out += _message(b"S", k.encode() + b"\0" + v.encode() + b"\0")
        out += _message(b"K", struct.pack("!ii", 4242, 1))
        out += _message(b"Z", b"I")
        writer.write(out)
        await writer.drain()
        await reader.read()  # until the client hangs up on it
    writer.close()


async def _silent(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    with contextlib.suppress(ConnectionError):
        await reader.read()  # reads, never answers
    writer.close()


@contextlib.asynccontextmanager
async def _host(handler: StreamHandler) -> AsyncIterator[str]:
    server = await asyncio.start_server(handler, "127.0.0.1", 0)
    try:
        yield f"127.0.0.1:{server.sockets[0].getsockname()[1]}"
    finally:
        server.close()
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(server.wait_closed(), 1)


@pytest.fixture
async def tcp_db_url(empty_db_url: str) -> AsyncIterator[str]:
    """empty_db_url reached over TCP: the embedded server listens on a unix
    socket only, so a proxy on 127.0.0.1 stands in for its host there."""
    real = urlsplit(empty_db_url).netloc.rpartition("@")[2]
    if real and not real.startswith("%2F"):
        yield empty_db_url
        return
    proxy = await PgProxy(empty_db_url).start()
    try:
        yield proxy.url
    finally:
        await proxy.stop()


def _multi(db_url: str, *before: str, query: str = "target_session_attrs=read-write") -> str:
    """db_url with hosts put before its own."""
    parts = urlsplit(db_url)
    userinfo, at, real = parts.netloc.rpartition("@")
    assert real and not real.startswith("%2F"), "this test needs a TCP DATABASE_URL"
    netloc = f"{userinfo}{at}{','.join((*before, real))}"
    return urlunsplit(parts._replace(netloc=netloc, query=query))


async def _ok(url: str, *args: str) -> str:
    code, out, err = await cli(url, *args, timeout=90)
    assert code == 0, f"dispatcher {' '.join(args)}: exit {code}: {err[-2000:]}"
    return out


async def _json(url: str, *args: str) -> object:
    return json.loads(await _ok(url, *args, "--json"))


def _port_pair() -> int:
    """A port p with p + 1 free too (`run --processes 2` listens on both),
    below the kernel's ephemeral range, where outgoing connections take
    theirs (one took p + 1 in CI once)."""
    import random
    import socket

    for _ in range(200):  # bounded
        p = random.randrange(20000, 32000)
        try:
            with socket.socket() as a, socket.socket() as b:
                a.bind(("127.0.0.1", p))
                b.bind(("127.0.0.1", p + 1))
        except OSError:
            continue
        return p
    raise AssertionError("no free pair of ports")


async def test_every_command_finds_the_writable_host(
    empty_db_url: str, tcp_db_url: str, receiver: Receiver
) -> None:
    unused_tcp_port = _port_pair()
    async with _host(_standby) as standby:
        url = _multi(tcp_db_url, "127.0.0.1:1", standby)
        doc = await _json(url, "migrate")
        assert doc["current"]  # type: ignore[index]
        ep = await _json(url, "endpoint", "add", "--url", receiver.url("/a"), "--event-type", "t")
        ep_id = str(ep["id"])  # type: ignore[index]
        for args in (
            ["endpoint", "list"],
            ["endpoint", "update", ep_id, "--rate-per-s", "100"],
            ["endpoint", "rotate-secret", ep_id, "--grace-s", "60"],
            ["endpoint", "disable", ep_id],
            ["endpoint", "enable", ep_id],
            ["endpoint", "health"],
            ["endpoint", "test", ep_id],
            ["enqueue", "--event-type", "t", "--payload", "{}", "--event-id", "e1"],
            ["enqueue", "--event-type", "t", "--payload", "{}", "--event-id", "held", "--hold"],
            ["event", "release", "held"],
            ["enqueue", "--event-type", "t", "--payload", "{}", "--event-id", "c", "--hold"],
            ["event", "cancel", "c"],
            ["alerts"],
            ["health"],
            ["slow"],
            ["dlq", "analyze"],
            ["dlq", "replay", "--endpoint", ep_id],
            ["app", "add", "shop"],
            ["app", "list"],
            ["app", "update", "shop", "--max-endpoints", "5"],
            ["app", "portal-link", "shop", "--base-url", "https://hooks.example.com"],
            ["event-type", "add", "order.paid"],
            ["event-type", "list"],
            ["event-type", "archive", "order.paid"],
            ["event-type", "unarchive", "order.paid"],
            ["ops-webhook", "list"],
            ["db", "status"],
            ["db", "url"],
        ):
            await _json(url, *args)
        token = await _json(url, "app", "token", "shop")
        await _json(url, "app", "revoke-token", token["token"])  # type: ignore[index]
        hook = await _json(url, "ops-webhook", "add", "--url", receiver.url("/ops"))
        await _json(url, "ops-webhook", "delete", str(hook["id"]))  # type: ignore[index]
        status = await _json(url, "db", "status")
        assert status["running"] is True  # type: ignore[index]

        await _ok(url, "run", "--drain")
        conn = await asyncpg.connect(empty_db_url)
        try:
            counts = await statuses(conn)
            assert counts.get("delivered", 0) == 2, counts  # e1 and the released one
            await add_endpoint(conn, receiver.url("/b"), event_types=["u"])
            # The admin server alone, then the worker under a supervisor.
            await _serves(url, ["serve", "--http", f"127.0.0.1:{unused_tcp_port}"],
                          unused_tcp_port)  # fmt: skip
            await _ok(url, "enqueue", "--event-type", "u", "--payload", "{}", "--event-id", "u1")
            await _serves(
                url,
                ["run", "--processes", "2", "--http", f"127.0.0.1:{unused_tcp_port}"],
                unused_tcp_port,
                until=lambda: _delivered(conn, "u1"),
            )
        finally:
            await conn.close()


async def _delivered(conn: asyncpg.Connection, event_id: str) -> bool:
    status = await conn.fetchval("SELECT status FROM webhook_queue WHERE event_id = $1", event_id)
    return bool(status == "delivered")


async def _serves(
    url: str,
    args: list[str],
    port: int,
    until: Callable[[], Awaitable[bool]] | None = None,
) -> None:
    """Starts `dispatcher ARGS`, waits for /healthz on PORT (and `until`),
    then SIGTERM: it must exit 0."""
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "dispatcher", *args,
        env=cli_env(url, **WORKER_ENV),
        stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    try:

        async def ready() -> None:
            async with aiohttp.ClientSession() as http:
                while True:
                    assert proc.returncode is None, "exited before it served"
                    with contextlib.suppress(aiohttp.ClientError):
                        async with http.get(f"http://127.0.0.1:{port}/healthz") as r:
                            if r.status == 200 and (until is None or await until()):
                                return
                    await asyncio.sleep(0.2)

        await asyncio.wait_for(ready(), 60)
        proc.send_signal(signal.SIGTERM)
        await asyncio.wait_for(proc.wait(), 30)
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
    assert proc.stderr is not None
    err = (await proc.stderr.read()).decode()
    assert proc.returncode == 0, err[-2000:]


async def test_a_silent_first_host_costs_one_connect_timeout(tcp_db_url: str) -> None:
    async with _host(_silent) as silent:
        query = "target_session_attrs=read-write&connect_timeout=2"
        url = _multi(tcp_db_url, silent, query=query)
        loop = asyncio.get_running_loop()
        t0 = loop.time()
        doc = await _json(url, "migrate")
        assert doc["current"]  # type: ignore[index]
        # Python's start-up included; without a timeout per host the silent
        # host took the whole one (10 s) and the real one was never tried.
        assert loop.time() - t0 < 9


async def test_no_writable_host_is_one_line(tcp_db_url: str) -> None:
    async with _host(_standby) as standby:
        url = _multi(tcp_db_url, "127.0.0.1:1", standby)
        parts = urlsplit(url)
        only_standby = urlunsplit(parts._replace(netloc=parts.netloc.rsplit(",", 1)[0]))
        code, out, err = await cli(only_standby, "health", "--json")
    assert code == 1 and out == ""
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert f"127.0.0.1:1,{standby}" in lines[0]
    assert "no host is read-write" in lines[0]
