"""The whole rig for one replication mode: hosts built and started, the
bench endpoint created, traffic flowing; torn down however it ends.

    async with Rig(synchronous=True, workdir=...) as rig:
        await rig.run_fault("kill_leader")

Owns the Network, the Hosts, the producer and the receiver timeline; the
faults themselves are in faults.py.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from types import TracebackType
from typing import Any

import aiohttp

from dispatcher.db import open_connection

from ..output import progress
from .hosts import PORT_ETCD, PORT_PG, PORT_RX, Hosts, Patroni, missing_programs
from .netns import Network, missing_tools, run
from .traffic import Producer, Timeline

HOSTS = ("etcd", "db1", "db2", "w1", "w2", "rx")


def unavailable() -> str | None:
    """Why the rig cannot run here (one line), or None when it can."""
    if sys.platform != "linux":
        return "the cluster rig needs Linux network namespaces"
    if os.geteuid() != 0:
        return "the cluster rig needs root (ip netns add)"
    missing = missing_tools() + missing_programs()
    if missing:
        return (
            "the cluster rig needs "
            + ", ".join(missing)
            + " (apt-get install patroni etcd-server iptables)"
        )
    probe = f"drprobe{os.getpid()}"
    res = run(["ip", "netns", "add", probe], check=False)
    if res.returncode != 0:
        return f"ip netns add fails here: {res.stderr.strip()}"
    run(["ip", "netns", "del", probe], check=False)
    return None


class Rig:
    """Hosts, processes and traffic of one run in one replication mode."""

    def __init__(
        self,
        *,
        synchronous: bool,
        rate: int = 200,
        latency_ms: float = 200.0,
        workdir: Path | None = None,
    ) -> None:
        self.synchronous = synchronous
        self.rate = rate
        self.latency_ms = latency_ms
        self.workdir = workdir or Path(tempfile.mkdtemp(prefix="dispatcher-rig-"))
        self.workdir.mkdir(parents=True, exist_ok=True)
        os.chmod(self.workdir, 0o755)  # Patroni runs as postgres under it
        self.net = Network()
        self.hosts = Hosts(self.net, self.workdir)
        self.session = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=3))
        self.patroni = Patroni(self.net, self.session)
        self.producer: Producer | None = None
        self.timeline: Timeline | None = None
        self.endpoint_id = 0

    @property
    def mode(self) -> str:
        return "synchronous" if self.synchronous else "asynchronous"

    def url(self, *, read_write: bool = True) -> str:
        """The multi-host URL the workers and the producer use."""
        a, b = self.net.hosts["db1"], self.net.hosts["db2"]
        attrs = "?target_session_attrs=read-write" if read_write else ""
        return f"postgresql://postgres@{a}:{PORT_PG},{b}:{PORT_PG}/postgres{attrs}"

    def env(self) -> dict[str, str]:
        env = dict(os.environ, DATABASE_URL=self.url(), DISPATCHER_ALLOW_PRIVATE_TARGETS="1")
        # A claim's lease is the endpoint's 2 s timeout + 1 s + this margin:
        # rows of a worker cut off come due again after 8 s, not 33.
        env["DISPATCHER_LEASE_MARGIN_S"] = "5"
        return env

    async def __aenter__(self) -> Rig:
        try:
            await self._build()
        except BaseException:
            await self.close()
            raise
        return self

    async def __aexit__(
        self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.close()

    async def _wait(self, what: str, check: Any, limit_s: float) -> None:
        t0 = time.monotonic()
        while time.monotonic() - t0 < limit_s:
            with contextlib.suppress(aiohttp.ClientError, TimeoutError, OSError, ValueError):
                if await check():
                    return
            await asyncio.sleep(0.3)
        dead = [f"{p.host}/{p.name}: {p.tail(3)}" for p in self.hosts.procs if not p.alive()]
        raise TimeoutError(f"{what} not ready within {limit_s:.0f} s; exited: {dead or 'none'}")

    async def _build(self) -> None:
        t0 = time.monotonic()
        self.net.open()
        for host in HOSTS:
            self.net.add_host(host)
        progress(f"rig {self.net.tag}: hosts on 10.{self.net.subnet}.0.0/24 ({self.mode})")
        self.hosts.start_etcd()
        etcd = f"http://{self.net.hosts['etcd']}:{PORT_ETCD}/health"

        async def etcd_up() -> bool:
            async with self.session.get(etcd) as resp:
                return resp.status == 200

        await self._wait("etcd", etcd_up, 30)
        for host in ("db1", "db2"):
            self.hosts.patroni_config(host, self.synchronous)
        self.hosts.start_patroni("db1")

        async def has_leader() -> bool:
            return await self.patroni.leader() == "db1"

        await self._wait("db1 as leader", has_leader, 90)
        self.hosts.start_patroni("db2")
        await self.patroni.wait_healthy(self.synchronous, 120)
        progress(f"rig: Patroni cluster healthy after {time.monotonic() - t0:.1f} s")
        await self._migrate()
        self.hosts.start_receiver(self.latency_ms)
        rx = f"http://{self.net.hosts['rx']}:{PORT_RX}"
        self.timeline = Timeline(rx, self.session)

        async def rx_up() -> bool:
            assert self.timeline is not None
            return "count" in await self.timeline.stats()

        await self._wait("receiver", rx_up, 20)
        self.endpoint_id = await self._endpoint(f"{rx}/c")
        for w in ("w1", "w2"):
            self.hosts.start_worker(w, self.url(), {"DISPATCHER_LEASE_MARGIN_S": "5"})
        self.producer = Producer(self.url(), self.endpoint_id, self.rate)
        self.producer.start("warmup")
        self.timeline.start()

        async def both_workers_deliver() -> bool:
            assert self.timeline is not None
            peers = (await self.timeline.stats()).get("peers", {})
            return all(peers.get(self.net.hosts[w], 0) > 0 for w in ("w1", "w2"))

        await self._wait("deliveries from both worker hosts", both_workers_deliver, 60)
        await self.producer.pause()
        progress(f"rig: delivering from w1 and w2 after {time.monotonic() - t0:.1f} s")

    def _cli(self, *args: str, timeout_s: float = 60) -> dict[str, Any]:
        argv = [sys.executable, "-m", "dispatcher", *args, "--json"]
        res = subprocess.run(
            argv, env=self.env(), capture_output=True, text=True, timeout=timeout_s, check=False
        )
        if res.returncode != 0:
            raise OSError(f"dispatcher {args[0]}: {res.stderr.strip()[-400:]}")
        doc: dict[str, Any] = json.loads(res.stdout)
        return doc

    async def _migrate(self) -> None:
        await asyncio.to_thread(self._cli, "migrate")

    async def _endpoint(self, url: str) -> int:
        doc = await asyncio.to_thread(
            self._cli, "endpoint", "add", "--url", url, "--timeout-ms", "2000",
            "--max-in-flight", "200", "--retry-base-ms", "100", "--retry-cap-ms", "1000",
        )  # fmt: skip
        return int(doc["id"])

    async def queue_counts(self) -> dict[str, int]:
        """Rows per status still to deliver, on the current leader."""
        conn = await open_connection(self.url(), timeout=3, command_timeout=5)
        try:
            rows = await conn.fetch(
                "SELECT status, count(*) AS n FROM webhook_queue "
                "WHERE status IN ('pending', 'in_flight', 'failed') GROUP BY status"
            )
        finally:
            await conn.close()
        return {r["status"]: int(r["n"]) for r in rows}

    async def close(self) -> None:
        for part in (self.producer, self.timeline):
            if part is not None:
                with contextlib.suppress(BaseException):
                    await part.close()
        with contextlib.suppress(BaseException):
            await self.session.close()
        # Namespaces first (kills everything inside, Patroni's postgres
        # children too), then reap our own children.
        try:
            self.net.close()
        finally:
            self.hosts.reap()
            if not os.environ.get("DISPATCHER_RIG_KEEP"):
                shutil.rmtree(self.workdir, ignore_errors=True)


__all__ = ["Rig", "unavailable"]
