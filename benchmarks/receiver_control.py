"""The harness's side of `python -m benchmarks.receiver`: start one on a free
127.0.0.1 port, read its counters, stop it.

Owns the receiver process and the HTTP session that reads its /stats and
/arrivals; never answers webhooks itself (receiver.py does).
"""

from __future__ import annotations

import asyncio
import ssl
import subprocess
import sys
from typing import Any

import aiohttp

from .errors import BenchError
from .processes import Children, last_line
from .tlsca import TlsFiles


class Receiver:
    def __init__(
        self,
        children: Children,
        latency_ms: float = 0.0,
        *,
        status: int = 200,
        hang: bool = False,
        record_arrivals: int = 0,
        fault: str | None = None,
        fault_share: float = 0.0,
        mix: str = "",
        lognormal_ms: tuple[float, float] | None = None,
        uniform_ms: tuple[float, float] | None = None,
        seed: int = 7,
        tls: TlsFiles | None = None,
        name: str = "receiver",
    ) -> None:
        self.children = children
        self.latency_ms = latency_ms
        self.status = status
        self.hang = hang
        self.record_arrivals = record_arrivals
        self.fault = fault
        self.fault_share = fault_share
        self.mix = mix
        self.lognormal_ms = lognormal_ms
        self.uniform_ms = uniform_ms
        self.seed = seed
        self.tls = tls
        self.name = name
        self.proc: subprocess.Popen[bytes] | None = None
        self.port = 0
        self._session: aiohttp.ClientSession | None = None

    async def start(self) -> None:
        # The receiver ends on its own (a bounded loop), but never before the
        # run it serves: its default hour killed the soaks at minute 60.
        lifetime = max(self.children.remaining(), 0.0) + 120.0
        argv = [sys.executable, "-m", "benchmarks.receiver", "--port", "0"]
        argv += ["--max-lifetime-s", f"{lifetime:.0f}"]
        if self.latency_ms:
            argv += ["--latency-ms", str(self.latency_ms)]
        if self.status != 200:
            argv += ["--status", str(self.status)]
        if self.hang:
            argv += ["--hang"]
        if self.record_arrivals:
            argv += ["--record-arrivals", str(self.record_arrivals)]
        if self.fault:
            argv += ["--fault", self.fault, "--fault-share", str(self.fault_share)]
        if self.mix:
            argv += ["--mix", self.mix]
        if self.lognormal_ms:
            argv += ["--latency-lognormal", "{:g}:{:g}".format(*self.lognormal_ms)]
        if self.uniform_ms:
            argv += ["--latency-uniform", "{:g}:{:g}".format(*self.uniform_ms)]
        if self.seed != 7:
            argv += ["--seed", str(self.seed)]
        if self.tls is not None:
            argv += ["--tls-cert", str(self.tls.cert), "--tls-key", str(self.tls.key)]
        proc, _, err_path = self.children.spawn(argv, name=self.name, stdout_pipe=True)
        self.proc = proc
        assert proc.stdout is not None
        loop = asyncio.get_running_loop()
        try:
            line = await asyncio.wait_for(loop.run_in_executor(None, proc.stdout.readline), 15)
        except TimeoutError:
            raise BenchError("the receiver did not become ready within 15 s") from None
        text = line.decode(errors="replace").strip()
        if not text.startswith("READY "):
            await self.children.stop(proc)
            raise BenchError(f"the receiver failed to start: {last_line(err_path.read_text())}")
        self.port = int(text.split()[1])
        tls: ssl.SSLContext | bool = True
        if self.tls is not None:
            tls = ssl.create_default_context(cafile=str(self.tls.ca))
        self._session = aiohttp.ClientSession(
            timeout=aiohttp.ClientTimeout(total=5), connector=aiohttp.TCPConnector(ssl=tls)
        )

    def url_for(self, path: str) -> str:
        scheme = "https" if self.tls is not None else "http"
        return f"{scheme}://127.0.0.1:{self.port}{path}"

    async def _get(self, path: str) -> Any:
        assert self._session is not None
        async with self._session.get(self.url_for(path)) as resp:
            return await resp.json()

    async def stats(self, *, paths: bool = False) -> dict[str, Any]:
        doc: dict[str, Any] = await self._get("/stats?paths=1" if paths else "/stats")
        return doc

    async def stats_or_none(self, *, paths: bool = False) -> dict[str, Any] | None:
        """stats, or None when the receiver did not answer (progress lines only)."""
        try:
            return await self.stats(paths=paths)
        except (aiohttp.ClientError, TimeoutError, OSError):
            return None

    async def arrivals(self) -> dict[str, float]:
        """First-arrival time.time() per webhook-id (with --record-arrivals)."""
        doc: dict[str, float] = await self._get("/arrivals")
        return doc

    @property
    def pid(self) -> int | None:
        return None if self.proc is None else self.proc.pid

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None
        if self.proc is not None:
            if self.proc.stdout is not None:
                self.proc.stdout.close()
            await self.children.stop(self.proc)
            self.proc = None
