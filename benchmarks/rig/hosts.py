"""What runs on each host of the rig: etcd, PostgreSQL under Patroni, the
dispatcher workers and the receiver, and Patroni's REST API.

Owns the processes it starts (each logs to a file in the rig's folder) and
the Patroni configuration; never kills a process by name, only by the pid it
started or by the namespace it runs in (netns.Network.kill_all).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp

from ..processes import REPO_ROOT
from .netns import Network

PG_BIN = Path("/usr/lib/postgresql/15/bin")
PORT_PG, PORT_REST, PORT_ETCD, PORT_RX = 5432, 8008, 2379, 8090
# Patroni's timings: ttl >= loop_wait + 2 * retry_timeout. Shorter than the
# defaults (30/10/10) so that a lost leader is replaced in seconds, not a
# minute; an operator who keeps the defaults waits up to ttl instead.
DCS_TIMINGS = {"ttl": 10, "loop_wait": 2, "retry_timeout": 4}


def missing_programs() -> list[str]:
    need = ["patroni", "etcd", "setpriv"]
    out = [p for p in need if shutil.which(p) is None]
    if not (PG_BIN / "postgres").exists():
        out.append(str(PG_BIN / "postgres"))
    return out


@dataclass
class Proc:
    host: str
    name: str
    popen: subprocess.Popen[bytes]
    log: Path

    def alive(self) -> bool:
        return self.popen.poll() is None

    def tail(self, n: int = 5) -> str:
        with contextlib.suppress(OSError):
            return "\n".join(self.log.read_text(errors="replace").splitlines()[-n:])
        return ""


@dataclass
class Hosts:
    """The processes of one rig, by host."""

    net: Network
    workdir: Path
    procs: list[Proc] = field(default_factory=list)

    def start(
        self, host: str, name: str, argv: list[str], env: dict[str, str] | None = None
    ) -> Proc:
        log = self.workdir / f"{host}-{name}.log"
        with log.open("ab") as f:
            popen = subprocess.Popen(
                self.net.argv(host, argv),
                stdin=subprocess.DEVNULL,
                stdout=f,
                stderr=subprocess.STDOUT,
                env=env if env is not None else dict(os.environ),
                cwd=self.workdir,
            )
        proc = Proc(host, name, popen, log)
        self.procs.append(proc)
        return proc

    def reap(self) -> None:
        """Waits for every started process that has exited or been killed;
        SIGKILLs the others first (called once the namespaces are emptied)."""
        for p in self.procs:
            if p.alive():
                with contextlib.suppress(ProcessLookupError):
                    p.popen.send_signal(signal.SIGKILL)
            with contextlib.suppress(subprocess.TimeoutExpired):
                p.popen.wait(timeout=5)

    # ---------------------------------------------------------------- etcd

    def start_etcd(self) -> Proc:
        addr = self.net.hosts["etcd"]
        data = self.workdir / "etcd"
        return self.start(
            "etcd",
            "etcd",
            [
                "etcd", "--name", "e1", "--data-dir", str(data),
                "--listen-client-urls", f"http://{addr}:{PORT_ETCD}",
                "--advertise-client-urls", f"http://{addr}:{PORT_ETCD}",
                "--listen-peer-urls", f"http://{addr}:2380",
                "--initial-advertise-peer-urls", f"http://{addr}:2380",
                "--initial-cluster", f"e1=http://{addr}:2380",
            ],
        )  # fmt: skip

    # ------------------------------------------------------------- patroni

    def patroni_config(self, host: str, synchronous: bool) -> Path:
        """Patroni's YAML (written as JSON, which YAML reads) for one node."""
        addr = self.net.hosts[host]
        base = self.workdir / host
        sockets = base / "sock"
        sockets.mkdir(parents=True, exist_ok=True)
        params: dict[str, Any] = {
            "wal_level": "replica",
            "hot_standby": "on",
            "wal_log_hints": "on",  # pg_rewind: a demoted leader rejoins
            "max_wal_senders": 10,
            "max_replication_slots": 10,
            "max_connections": 100,
            "shared_buffers": "64MB",
            # Each node's sockets in its own folder: the namespaces share
            # the file system (and the machine's PostgreSQL owns
            # /var/run/postgresql/.s.PGSQL.5432).
            "unix_socket_directories": str(sockets),
        }
        if synchronous:
            # Commit returns once the synchronous standby has flushed it.
            params["synchronous_commit"] = "on"
        doc = {
            "scope": self.net.tag,
            "namespace": "/dispatcher-rig/",
            "name": host,
            "restapi": {
                "listen": f"{addr}:{PORT_REST}",
                "connect_address": f"{addr}:{PORT_REST}",
            },
            "etcd3": {"host": f"{self.net.hosts['etcd']}:{PORT_ETCD}"},
            "bootstrap": {
                "dcs": {
                    **DCS_TIMINGS,
                    # Async mode: the standby may lag; it must still be
                    # allowed to take over (that is the case measured).
                    "maximum_lag_on_failover": 1 << 30,
                    "synchronous_mode": synchronous,
                    "postgresql": {"use_pg_rewind": True, "parameters": params},
                },
                "initdb": [{"encoding": "UTF8"}, {"locale": "C"}],
                "pg_hba": [
                    "local all all trust",
                    "host all all 0.0.0.0/0 trust",
                    "host replication all 0.0.0.0/0 trust",
                ],
            },
            "postgresql": {
                "listen": f"{addr}:{PORT_PG}",
                "connect_address": f"{addr}:{PORT_PG}",
                "data_dir": str(base / "data"),
                "bin_dir": str(PG_BIN),
                "pgpass": str(base / "pgpass"),
                "authentication": {
                    "superuser": {"username": "postgres", "password": "rig"},
                    "replication": {"username": "replicator", "password": "rig"},
                    "rewind": {"username": "postgres", "password": "rig"},
                },
                "parameters": {"unix_socket_directories": str(sockets)},
            },
        }
        path = base / "patroni.yml"
        path.write_text(json.dumps(doc, indent=1))
        shutil.chown(base, "postgres", "postgres")
        shutil.chown(sockets, "postgres", "postgres")
        shutil.chown(path, "postgres", "postgres")
        return path

    def start_patroni(self, host: str) -> Proc:
        """Patroni as the postgres user (PostgreSQL refuses to run as root);
        setpriv execs, so the pid is Patroni's own."""
        cfg = self.workdir / host / "patroni.yml"
        env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(cfg.parent)}
        argv = ["setpriv", "--reuid=postgres", "--regid=postgres", "--init-groups"]
        return self.start(host, "patroni", [*argv, "patroni", str(cfg)], env)

    # -------------------------------------------------- workers, receiver

    def start_worker(self, host: str, database_url: str, extra_env: dict[str, str]) -> Proc:
        env = dict(os.environ)
        env.update(
            DATABASE_URL=database_url,
            DISPATCHER_ALLOW_PRIVATE_TARGETS="1",
            PYTHONPATH=str(REPO_ROOT),
            **extra_env,
        )
        argv = [sys.executable, "-m", "dispatcher", "run", "--max-in-flight", "256"]
        return self.start(host, "worker", argv, env)

    def start_receiver(self, latency_ms: float) -> Proc:
        env = dict(os.environ, PYTHONPATH=str(REPO_ROOT))
        argv = [
            sys.executable, "-m", "benchmarks.receiver",
            "--host", self.net.hosts["rx"], "--port", str(PORT_RX),
            "--latency-ms", str(latency_ms), "--record-arrivals", "1000000",
        ]  # fmt: skip
        return self.start("rx", "receiver", argv, env)


class Patroni:
    """Patroni's REST API on the database hosts, read from the root namespace."""

    def __init__(self, net: Network, session: aiohttp.ClientSession) -> None:
        self.net = net
        self.session = session

    def url(self, host: str, path: str) -> str:
        return f"http://{self.net.hosts[host]}:{PORT_REST}{path}"

    async def cluster(self) -> dict[str, Any] | None:
        """GET /cluster from the first node that answers (None: none did)."""
        for host in ("db1", "db2"):
            with contextlib.suppress(aiohttp.ClientError, TimeoutError, ValueError):
                async with self.session.get(self.url(host, "/cluster")) as resp:
                    doc: dict[str, Any] = await resp.json()
                    return doc
        return None

    async def leader(self) -> str | None:
        doc = await self.cluster()
        for m in (doc or {}).get("members", []):
            if m.get("role") == "leader" and m.get("state") == "running":
                return str(m["name"])
        return None

    async def healthy(self, synchronous: bool) -> bool:
        """One running leader and one streaming replica (in synchronous mode:
        the synchronous standby), each with Patroni's pending restart done."""
        doc = await self.cluster() or {}
        members = doc.get("members", [])
        roles = sorted(
            str(m.get("role")) for m in members if m.get("state") in ("running", "streaming")
        )
        want = ["leader", "sync_standby"] if synchronous else ["leader", "replica"]
        return roles == want

    async def wait_healthy(self, synchronous: bool, limit_s: float) -> float:
        """Seconds until healthy; TimeoutError after limit_s."""
        t0 = time.monotonic()
        while time.monotonic() - t0 < limit_s:
            if await self.healthy(synchronous):
                return time.monotonic() - t0
            await asyncio.sleep(0.5)
        raise TimeoutError(f"cluster not healthy within {limit_s:.0f} s: {await self.cluster()}")

    async def switchover(self, leader: str, candidate: str) -> None:
        body = {"leader": leader, "candidate": candidate}
        async with self.session.post(self.url(leader, "/switchover"), json=body) as resp:
            if resp.status != 200:
                raise OSError(f"switchover refused ({resp.status}): {await resp.text()}")
