"""What a measured phase cost: CPU seconds of the dispatcher, PostgreSQL,
the receivers and the whole machine, pg_stat_database deltas, and the
figures every scenario reports (phase_metrics); plus the machine's facts.

The only benchmark module that reads process and machine CPU (psutil); it
measures and never starts or stops anything.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import os
import platform
import subprocess
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from .database import DB_COUNTERS, db_counters, wal_position
from .processes import REPO_ROOT, ChildResult, engine_stats, last_line
from .receiver_control import Receiver

try:
    import psutil  # type: ignore[import-untyped]
except ImportError:  # pragma: no cover - a dev dependency; CPU figures become "-"
    psutil = None


def machine_info() -> dict[str, Any]:
    info: dict[str, Any] = {
        "nproc": os.cpu_count(),
        "python": platform.python_version(),
        "platform": platform.platform(),
    }
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                info["cpu_model"] = line.split(":", 1)[1].strip()
                break
    with contextlib.suppress(OSError):
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                info["mem_total_mb"] = round(int(line.split()[1]) / 1024)
                break
    with contextlib.suppress(OSError):
        info["loadavg_before"] = [round(x, 2) for x in os.getloadavg()]
    with contextlib.suppress(Exception):
        rev = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"],
            cwd=REPO_ROOT, capture_output=True, text=True, timeout=5,
        )  # fmt: skip
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--", "dispatcher", "schema"],
            cwd=REPO_ROOT, capture_output=True, text=True, timeout=5,
        )  # fmt: skip
        if rev.returncode == 0:
            info["git_commit"] = rev.stdout.strip()
            info["dispatcher_dirty_files"] = [ln[3:] for ln in dirty.stdout.splitlines()]
    info["dispatcher_tree_sha256"] = _tree_hash(REPO_ROOT / "dispatcher", REPO_ROOT / "schema")
    return info


def _tree_hash(*roots: Path) -> str | None:
    """A hash of the code under test: tells whether two runs measured the same code."""
    h = hashlib.sha256()
    try:
        for root in roots:
            for f in sorted(root.rglob("*")):
                if f.is_file() and f.suffix in (".py", ".sql"):
                    h.update(str(f.relative_to(REPO_ROOT)).encode() + b"\0")
                    h.update(f.read_bytes())
    except OSError:
        return None
    return h.hexdigest()[:16]


def cpu_busy() -> float | None:
    """Busy CPU seconds of the whole machine so far (all cores)."""
    if psutil is None:
        return None
    t = psutil.cpu_times()
    return float(sum(t) - t.idle - getattr(t, "iowait", 0.0))


def process_cpu_s(pid: int | None) -> float | None:
    """User + system CPU seconds of a live process so far."""
    if psutil is None or pid is None:
        return None
    try:
        t = psutil.Process(pid).cpu_times()
    except psutil.Error:
        return None
    return float(t.user + t.system)


async def settle(max_wait_s: float = 20.0, idle_below: float = 0.15) -> float:
    """Waits (bounded) until the machine is nearly idle, e.g. after autovacuum
    or a checkpoint that a previous phase set off; returns the seconds waited."""
    t0 = time.monotonic()
    ncpu = os.cpu_count() or 1
    prev = cpu_busy()
    if prev is None:
        return 0.0
    while time.monotonic() - t0 < max_wait_s:
        await asyncio.sleep(0.5)
        now = cpu_busy()
        assert now is not None
        if (now - prev) / (0.5 * ncpu) < idle_below:
            break
        prev = now
    return round(time.monotonic() - t0, 1)


class PgCpu:
    """CPU seconds of the local PostgreSQL processes over a phase.

    Sampled (once a second and at both ends) per pid, so backends that exit
    during the phase count up to their last sample. `bench` is the share of
    backends connected to the bench database (their ps title names it).
    """

    def __init__(self, db_name: str) -> None:
        self.db_name = db_name
        self.base: dict[int, float] = {}
        self.last: dict[int, tuple[float, bool]] = {}
        self._first = True

    def sample(self) -> None:
        if psutil is None:
            return
        for proc in psutil.process_iter(["name"]):
            if proc.info.get("name") != "postgres":
                continue
            try:
                t = proc.cpu_times()
                title = " ".join(proc.cmdline())
            except psutil.Error:
                continue
            cpu = float(t.user + t.system)
            if proc.pid not in self.base:
                self.base[proc.pid] = cpu if self._first else 0.0
            self.last[proc.pid] = (cpu, f" {self.db_name} " in f" {title} ")
        self._first = False

    def totals(self) -> tuple[float, float] | None:
        if not self.last:
            return None
        total = bench = 0.0
        for pid, (cpu, is_bench) in self.last.items():
            used = max(cpu - self.base.get(pid, 0.0), 0.0)
            total += used
            if is_bench:
                bench += used
        return total, bench


class Meter:
    """CPU, database and receiver counters across one measured phase."""

    def __init__(self, admin_url: str, db_name: str, receivers: Sequence[Receiver]) -> None:
        self.admin_url = admin_url
        self.db_name = db_name
        self.receivers = list(receivers)
        self.pg = PgCpu(db_name)
        self.started = False
        self.wal0: int | None = None

    async def start(self) -> None:
        self.counters0 = await db_counters(self.admin_url, self.db_name)
        self.wal0 = await wal_position(self.admin_url)
        self.busy0 = cpu_busy()
        self.rcv0 = [process_cpu_s(r.pid) for r in self.receivers]
        self.pg.sample()
        self.started = True

    def sample(self) -> None:
        self.pg.sample()

    async def stop(self) -> dict[str, Any]:
        busy1 = cpu_busy()
        self.pg.sample()
        rcv1 = [process_cpu_s(r.pid) for r in self.receivers]
        counters1 = await db_counters(self.admin_url, self.db_name)
        wal1 = await wal_position(self.admin_url)
        rcv: float | None = 0.0
        for x, y in zip(self.rcv0, rcv1, strict=True):
            rcv = None if rcv is None or x is None or y is None else rcv + y - x
        pg = self.pg.totals()
        return {
            "machine_busy_cpu_s": None
            if self.busy0 is None or busy1 is None
            else busy1 - self.busy0,
            "receiver_cpu_s": rcv,
            "wal_bytes": None if self.wal0 is None or wal1 is None else wal1 - self.wal0,
            "postgres_cpu_s": pg[0] if pg else None,
            "postgres_bench_db_cpu_s": pg[1] if pg else None,
            "db_counters": (
                {k: counters1[k] - self.counters0[k] for k in DB_COUNTERS}
                if self.counters0 and counters1
                else None
            ),
        }


def phase_metrics(
    runs: Sequence[ChildResult],
    meter: dict[str, Any],
    db: dict[str, Any],
    enqueue: dict[str, Any] | None,
    *,
    expected: int,
    seconds: float,
    duplicates: int,
    posts: int,
) -> dict[str, Any]:
    """The figures every scenario reports, from one measured phase (the
    dispatcher processes, Meter.stop, db_results and Bench.enqueue)."""
    delivered = int(db["delivered"])
    per_k = 1000 / delivered if delivered else None
    cpu = sum(r.cpu_s for r in runs)
    busy = meter["machine_busy_cpu_s"]
    rcv = meter["receiver_cpu_s"]
    pg = meter["postgres_cpu_s"]
    # Busy CPU none of the processes accounts for: the kernel's loopback
    # networking, the harness, and any other load on the machine.
    foreign = None
    if busy is not None and rcv is not None and pg is not None:
        foreign = max(busy - cpu - rcv - pg, 0.0)
    counters = meter["db_counters"]
    engines = [engine_stats(r.stderr) for r in runs]

    def r4(v: float | None, k: float | None = 1.0) -> float | None:
        return None if v is None or k is None else round(v * k, 4)

    return {
        "delivered": delivered,
        "expected": expected,
        "lost": expected - delivered,
        "duplicates": duplicates,
        "receiver_posts": posts,
        "seconds": round(seconds, 3),
        "deliveries_per_min": round(delivered / seconds * 60, 1) if seconds > 0 else None,
        "enqueue_events_per_s": enqueue["events_per_s"] if enqueue else None,
        "enqueue_s": enqueue["seconds"] if enqueue else None,
        "lag_p50_ms": db["lag_p50_ms"],
        "lag_p99_ms": db["lag_p99_ms"],
        "lag_max_ms": db["lag_max_ms"],
        "http_p50_ms": db["http_p50_ms"],
        "http_p99_ms": db["http_p99_ms"],
        "dispatcher_cpu_s": round(cpu, 3),
        "dispatcher_cpu_s_per_1000": r4(cpu, per_k),
        "dispatcher_cpu_per_wall": round(cpu / seconds, 3) if seconds > 0 else None,
        "postgres_cpu_s": r4(pg),
        "postgres_cpu_s_per_1000": r4(pg, per_k),
        "receiver_cpu_s": r4(rcv),
        "machine_busy_cpu_s": r4(busy),
        "unattributed_cpu_s": r4(foreign),
        "db_counters": counters,
        "wal_bytes_per_1000": r4(meter["wal_bytes"], per_k),
        # xact_commit counts one per autocommitted statement or transaction.
        "db_xacts_per_1000": (
            round(counters["xact_commit"] * per_k, 1) if counters and per_k else None
        ),
        "peak_rss_mb": round(max((r.maxrss_mb for r in runs), default=0.0), 1),
        "exit_codes": [r.returncode for r in runs],
        "timed_out": any(r.timed_out for r in runs),
        "engine": engines,
        # Claim queries per 1,000 deliveries (issue 35: <= 20 at every latency).
        "claims_per_1000": (
            round(sum(e.get("claims", 0) for e in engines if e) * per_k, 1) if per_k else None
        ),
        "stderr_tail": [last_line(r.stderr) for r in runs if r.returncode],
    }
