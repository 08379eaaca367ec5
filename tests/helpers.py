"""Small helpers shared by integration and end-to-end tests."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import random
import socket
import sys
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field, replace
from typing import Any

import aiohttp
import asyncpg

from dispatcher.core.models import EndpointSpec
from dispatcher.core.signing import generate_secret
from dispatcher.db import catalog
from dispatcher.settings import Settings
from dispatcher.worker.engine import Engine
from tests.receivers import Receiver

FAST = Settings(
    allow_private_targets=True,
    poll_interval_s=0.2,
    flush_interval_s=0.005,
    lease_margin_s=1.0,
    endpoint_refresh_s=0.2,
    grace_s=5.0,
)


async def add_endpoint(conn: asyncpg.Connection, url: str, **kw: Any) -> tuple[int, str]:
    spec = EndpointSpec(url=url, **kw)
    spec.validate()
    secret = kw.get("secret") or generate_secret()
    record = await catalog.add_endpoint(conn, spec, secret)
    return record.id, secret


def engine(db_url: str, **overrides: Any) -> Engine:
    return Engine(replace(FAST, **overrides), db_url)


async def drain(db_url: str, timeout: float = 30.0, **overrides: Any) -> Engine:
    e = engine(db_url, **overrides)
    await asyncio.wait_for(e.run(drain=True), timeout)
    return e


async def statuses(conn: asyncpg.Connection) -> dict[str, int]:
    return await catalog.status_counts(conn)


def cli_env(db_url: str, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("DISPATCHER_")}
    env["DATABASE_URL"] = db_url
    env["DISPATCHER_ALLOW_PRIVATE_TARGETS"] = "1"
    env.update(extra)
    return env


async def cli(db_url: str, *args: str, env: dict[str, str] | None = None,
              timeout: float = 60.0) -> tuple[int, str, str]:  # fmt: skip
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "dispatcher", *args,
        env=env or cli_env(db_url),
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    out, err = await asyncio.wait_for(proc.communicate(), timeout)
    assert proc.returncode is not None
    return proc.returncode, out.decode(), err.decode()


async def bench_smoke(server_url: str, *args: str, timeout: float = 240.0) -> dict[str, Any]:
    """`dispatcher bench ARGS --smoke --json` from the checkout, as a user runs
    it; asserts it exited 0 and returns its JSON document."""
    from tests.conftest import REPO

    env = cli_env(server_url)
    env.pop("DISPATCHER_ALLOW_PRIVATE_TARGETS")  # the harness sets it for its own processes
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "dispatcher", "bench", *args, "--smoke", "--json",
        env=env, cwd=REPO, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    out, err = await asyncio.wait_for(proc.communicate(), timeout)
    assert proc.returncode == 0, err.decode()[-3000:]
    doc: dict[str, Any] = json.loads(out)
    return doc


# A worker as tests run it: short lease margin and poll, a bounded grace.
WORKER_ENV = {
    "DISPATCHER_LEASE_MARGIN_S": "1",
    "DISPATCHER_POLL_INTERVAL_S": "0.2",
    "DISPATCHER_GRACE_S": "10",
}


async def worker(db_url: str, *args: str) -> asyncio.subprocess.Process:
    """`dispatcher run ARGS` as a container runs it, its log on a pipe."""
    return await asyncio.create_subprocess_exec(
        sys.executable, "-m", "dispatcher", "run", *args,
        env=cli_env(db_url, **WORKER_ENV),
        stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip


async def until_received(receiver: Receiver, n: int, timeout: float = 30) -> None:
    async def wait() -> None:
        while len(receiver.received) < n:
            await asyncio.sleep(0.02)

    await asyncio.wait_for(wait(), timeout)


@asynccontextmanager
async def admin_api(
    db_url: str, settings: Settings, token: str = "t0ken"
) -> AsyncIterator[tuple[aiohttp.ClientSession, str]]:
    """The admin API on an ephemeral port: a session holding the bearer
    token and the server's base URL."""
    from dispatcher.web.admin import start_admin

    runner = await start_admin("127.0.0.1:0", replace(settings, admin_token=token), db_url,
                               quiet=True)  # fmt: skip
    host, port = runner.addresses[0][:2]
    try:
        async with aiohttp.ClientSession(headers={"Authorization": f"Bearer {token}"}) as s:
            yield s, f"http://{host}:{port}"
    finally:
        await runner.cleanup()


def _below_ephemeral() -> range:
    """Ports under the kernel's ephemeral range, which every port-0 bind
    (the tests' own receivers) and every outgoing connection draw from."""
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            low = int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        low = 32768
    return range(max(1024, low - 12000), max(1025, low))


def free_port() -> int:
    """A port for a process a test starts, free when asked. Not one the
    kernel hands out for port 0: between this check and the process's bind,
    another test's receiver could take such a port, and answered the
    process's /readyz with its 200 "ok" (the SDK and rotation tests' rare
    failures). Here only another free_port() caller can, one in thousands."""
    ports = _below_ephemeral()
    for _ in range(200):
        port = random.choice(ports)
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise RuntimeError(f"no free port in {ports}")


@dataclass
class Served:
    """A `dispatcher` command serving HTTP in its own process, as deployed."""

    proc: asyncio.subprocess.Process
    base: str
    log: bytearray = field(default_factory=bytearray)

    def alive(self) -> bool:
        return self.proc.returncode is None

    def memory_kib(self, what: str) -> int:
        """VmHWM (the peak resident set so far) or VmRSS of the process."""
        with open(f"/proc/{self.proc.pid}/status") as f:
            for line in f:
                if line.startswith(what + ":"):
                    return int(line.split()[1])
        raise AssertionError(f"no {what} in /proc/{self.proc.pid}/status")


async def ready(s: aiohttp.ClientSession, base: str) -> bool:
    """Whether `base` answers /readyz as a ready dispatcher does: a 200 with
    {"ready": true}, not another process's 200 on a port taken between
    free_port() and the bind."""
    with contextlib.suppress(aiohttp.ClientError, ValueError):
        async with s.get(base + "/readyz") as r:
            doc = await r.json(content_type=None)
            return r.status == 200 and isinstance(doc, dict) and doc.get("ready") is True
    return False


@asynccontextmanager
async def served(db_url: str, command: str = "run", **env: str) -> AsyncIterator[Served]:
    """`dispatcher COMMAND --http 127.0.0.1:PORT` (run: the worker and its
    admin API in one process), ready; its stderr kept in `log`. Afterwards
    it must stop by SIGTERM with exit 0 and no traceback."""
    port = free_port()
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "dispatcher", command, "--http", f"127.0.0.1:{port}",
        env=cli_env(db_url, **WORKER_ENV, **env),
        stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    srv = Served(proc, f"http://127.0.0.1:{port}")

    async def read_log() -> None:
        assert proc.stderr is not None
        while chunk := await proc.stderr.read(65536):
            srv.log.extend(chunk)

    reader = asyncio.create_task(read_log())
    try:
        async with aiohttp.ClientSession() as s:
            for _ in range(300):
                if await ready(s, srv.base):
                    break
                assert srv.alive(), srv.log.decode(errors="replace")[-2000:]
                await asyncio.sleep(0.05)
        yield srv
    finally:
        if srv.alive():
            proc.terminate()
        try:
            code = await asyncio.wait_for(proc.wait(), 30)
        except TimeoutError:
            proc.kill()  # its loop is stuck: SIGTERM's handler never runs
            code = await proc.wait()
        await asyncio.wait_for(reader, 5)
        log = srv.log.decode(errors="replace")
        assert code == 0, log[-3000:]
        assert "Traceback" not in log, log[-3000:]


@dataclass(frozen=True)
class TenantApi:
    """The admin API with applications: calls as the admin, or with one
    application's own `dtk_` token."""

    http: aiohttp.ClientSession  # carries the admin token
    base: str
    tokens: dict[str, str]  # application → its dtk_ token

    async def call(
        self, method: str, path: str, body: Any = None, *, app: str | None = None
    ) -> tuple[int, Any, Any]:
        headers = {} if app is None else {"Authorization": f"Bearer {self.tokens[app]}"}
        async with self.http.request(method, self.base + path, json=body, headers=headers) as r:
            doc = await r.json() if r.content_type == "application/json" else await r.text()
            return r.status, doc, r.headers

    async def ok(self, method: str, path: str, body: Any = None, *, app: str | None = None) -> Any:
        status, doc, _ = await self.call(method, path, body, app=app)
        assert status < 300, (method, path, status, doc)
        return doc


@asynccontextmanager
async def tenant_api(
    db_url: str, admin_token: str, apps: Sequence[str]
) -> AsyncIterator[TenantApi]:
    """An in-process admin API with `apps` created, each with a token."""
    async with admin_api(db_url, FAST, admin_token) as (http, base):
        api = TenantApi(http, base, {})
        for app in apps:
            await api.ok("POST", "/v1/applications", {"id": app})
            api.tokens[app] = (await api.ok("POST", f"/v1/applications/{app}/tokens", {}))["token"]
        yield api


async def rows_of(conn: asyncpg.Connection, app: str, statuses: Sequence[str] = ()) -> int:
    """Queue rows of `app`'s endpoints (with one of `statuses`, when given)."""
    return int(
        await conn.fetchval(
            "SELECT count(*) FROM webhook_queue q JOIN endpoints e ON e.id = q.endpoint_id"
            " WHERE e.application_id = $1 AND (cardinality($2::text[]) = 0 OR q.status = ANY($2))",
            app, list(statuses),
        )
    )  # fmt: skip


async def otlp_sink() -> tuple[Any, str, list[Any]]:
    """A real OTLP/HTTP traces receiver on 127.0.0.1: (its runner, its base
    URL, the spans it decoded with opentelemetry-proto, as they come)."""
    from aiohttp import web
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
        ExportTraceServiceRequest,
    )

    spans: list[Any] = []

    async def traces(request: web.Request) -> web.Response:
        req = ExportTraceServiceRequest()
        req.ParseFromString(await request.read())
        for rs in req.resource_spans:
            for ss in rs.scope_spans:
                spans.extend(ss.spans)
        return web.Response(content_type="application/x-protobuf", body=b"")

    app = web.Application()
    app.router.add_post("/v1/traces", traces)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    host, port = runner.addresses[0][:2]
    return runner, f"http://{host}:{port}", spans


def span_attributes(span: Any) -> dict[str, object]:
    """An OTLP span's attributes as a dict of their values."""
    out: dict[str, object] = {}
    for kv in span.attributes:
        v = kv.value
        out[kv.key] = v.string_value or v.int_value or v.bool_value or v.double_value
    return out
