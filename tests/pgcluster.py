"""A PostgreSQL primary and a streaming asynchronous standby on this machine,
for tests of what a failover does: initdb into a temporary folder, the
standby made with pg_basebackup, each on a free port on 127.0.0.1, the
standby's replication through a PgProxy (tests/pgproxy.py) so a test can
black-hole it and make the standby miss the last writes. Everything is
stopped and removed by `close()`.

The binaries are the newest /usr/lib/postgresql/*/bin (or PG_BINDIR's);
`bindir()` is None where there are none (the test skips, saying so). As
root, the servers run as the `postgres` user, as initdb requires."""

from __future__ import annotations

import asyncio
import contextlib
import glob
import os
import pwd
import shutil
import subprocess
import tempfile
from pathlib import Path

from tests.helpers import free_port
from tests.pgproxy import PgProxy


def bindir() -> Path | None:
    wanted = os.environ.get("PG_BINDIR")
    found = [wanted] if wanted else sorted(
        glob.glob("/usr/lib/postgresql/*/bin"), key=lambda p: int(p.split("/")[-2])
    )  # fmt: skip
    for d in reversed(found):
        if (Path(d) / "initdb").exists() and (Path(d) / "pg_basebackup").exists():
            return Path(d)
    return None


class Cluster:
    """`primary_url`, `standby_url` and `url` (both hosts, the writable one
    wanted, as a worker would be given) name database `dispatcher`."""

    def __init__(self) -> None:
        found = bindir()
        assert found is not None, "no PostgreSQL binaries"
        self.bin = found
        self.user = "postgres" if os.geteuid() == 0 else None
        # As root the folder must be reachable by the servers' user: not in
        # the tests' private TMPDIR.
        self.root = Path(
            tempfile.mkdtemp(prefix="dispatcher-ha-", dir="/tmp" if self.user else None)
        )
        self.primary = self.root / "primary"
        self.standby = self.root / "standby"
        self.primary_port = free_port()
        self.standby_port = free_port()
        self.proxy: PgProxy | None = None
        self._started: list[Path] = []

    def _url(self, port: int) -> str:
        return f"postgresql://postgres@127.0.0.1:{port}/dispatcher"

    @property
    def primary_url(self) -> str:
        return self._url(self.primary_port)

    @property
    def standby_url(self) -> str:
        return self._url(self.standby_port)

    @property
    def url(self) -> str:
        return (
            f"postgresql://postgres@127.0.0.1:{self.primary_port},127.0.0.1:{self.standby_port}"
            "/dispatcher?target_session_attrs=read-write"
        )

    async def _run(self, *args: str, timeout: float = 120) -> None:
        def run() -> None:
            subprocess.run(
                [str(self.bin / args[0]), *args[1:]],
                check=True,
                capture_output=True,
                timeout=timeout,
                user=self.user,
                cwd=self.root,
            )

        try:
            await asyncio.to_thread(run)
        except subprocess.CalledProcessError as exc:
            raise AssertionError(f"{args[0]} failed: {exc.stderr.decode()[-2000:]}") from None

    async def start(self) -> Cluster:
        if self.user is not None:
            pw = pwd.getpwnam(self.user)
            os.chown(self.root, pw.pw_uid, pw.pw_gid)
        await self._run("initdb", "-D", str(self.primary), "-U", "postgres", "-A", "trust",
                        "--no-sync")  # fmt: skip
        with open(self.primary / "postgresql.conf", "a") as conf:
            conf.write(
                f"port = {self.primary_port}\nlisten_addresses = '127.0.0.1'\n"
                "unix_socket_directories = ''\nwal_level = replica\nmax_wal_senders = 4\n"
                "fsync = off\nshared_buffers = 32MB\nwal_sender_timeout = 5s\n"
            )
        with open(self.primary / "pg_hba.conf", "a") as hba:
            hba.write("host replication all 127.0.0.1/32 trust\n")
        await self._ctl(self.primary, "start")
        await self._run("psql", "-h", "127.0.0.1", "-p", str(self.primary_port), "-U", "postgres",
                        "-c", "CREATE DATABASE dispatcher", "postgres")  # fmt: skip
        return self

    async def add_standby(self) -> None:
        """The standby, streaming from the primary through the proxy; call
        once the primary holds what the test set up (it is copied)."""
        self.proxy = await PgProxy(f"postgresql://postgres@127.0.0.1:{self.primary_port}/x").start()
        await self._run("pg_basebackup", "-h", "127.0.0.1", "-p", str(self.primary_port),
                        "-U", "postgres", "-D", str(self.standby), "-X", "stream", "-c", "fast",
                        "--no-sync")  # fmt: skip
        with open(self.standby / "postgresql.conf", "a") as conf:
            conf.write(
                f"port = {self.standby_port}\n"
                f"primary_conninfo = 'host=127.0.0.1 port={self.proxy.port} user=postgres'\n"
                "hot_standby = on\n"
            )
        (self.standby / "standby.signal").touch()
        if self.user is not None:
            shutil.chown(self.standby / "standby.signal", self.user, self.user)
        await self._ctl(self.standby, "start")

    async def _ctl(self, data: Path, *args: str) -> None:
        log = data.parent / f"{data.name}.log"
        await self._run("pg_ctl", "-D", str(data), "-l", str(log), "-w", "-t", "60", *args)
        if args[0] == "start":
            self._started.append(data)

    async def stop_primary(self) -> None:
        """As a crash: no shutdown checkpoint sent to the standby."""
        await self._run("pg_ctl", "-D", str(self.primary), "-m", "immediate", "-w", "stop")

    async def promote(self) -> None:
        await self._run("pg_ctl", "-D", str(self.standby), "-w", "-t", "60", "promote")

    async def close(self) -> None:
        if self.proxy is not None:
            await self.proxy.stop()
        for data in self._started:
            if (data / "postmaster.pid").exists():
                with contextlib.suppress(Exception):
                    await self._run("pg_ctl", "-D", str(data), "-m", "immediate", "-w", "stop",
                                    timeout=60)  # fmt: skip
        shutil.rmtree(self.root, ignore_errors=True)
